"""Releases pin whitelist versions: production pools change whitelists only through a publish, canary nodes use
their rollout's pins, rollbacks return to the old pins, non-production pools follow the latest versions."""

import asyncio
import importlib
import json

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from controlplane.audit.models import AuditEntry
from controlplane.lib.errors import Conflict
from controlplane.nodes import whitelist_pins
from controlplane.nodes.exceptions import ProductionGateClosed
from controlplane.nodes.models import EngineNode, Pool, PoolRelease, Rollout
from controlplane.nodes.services import agent_policy, rollouts
from controlplane.nodes.services.engine_nodes import node_create
from controlplane.nodes.services.pools import pool_publish, pool_rollback
from controlplane.operations.policy_bundle import policy_bundle, policy_message
from controlplane.params.services.templates import template_create, template_version_create
from controlplane.params.services.whitelists import whitelist_create, whitelist_version_create
from tests.factories import legal_whitelist, pools, ran_healthy

pytestmark = pytest.mark.django_db

IN_MEMORY = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}


def versions(actor, *documents: dict):
    """A template whose versions are these `inference_params` documents (each names `legal` unless it says not)."""
    template = template_create(actor=actor, name="chat")
    made = []
    for i, params in enumerate(documents):
        document = {"inference_params": params}
        made.append(template_version_create(actor=actor, template=template, document=document, base_number=i or None))
    return made


def whitelists(pool: Pool, *, canary: bool = False) -> dict:
    return policy_bundle(Pool.objects.get(pk=pool.pk), canary=canary)["content"]["whitelists"]


def edit(actor, whitelist, scenarios: list[str]):
    whitelist.refresh_from_db()
    return whitelist_version_create(
        actor=actor, whitelist=whitelist, scenarios=scenarios, base_number=whitelist.latest_number
    )


def stage(sre, staging, version, *, reason: str):
    """Publish to staging, where node stg-1 runs the version healthy for the soak window (the production gate)."""
    pool_publish(actor=sre, pool=staging, version=version, reason=reason)
    ran_healthy(EngineNode.objects.get(name="stg-1"), version)


@pytest.fixture
def fleet(users):
    """staging and prod-main both on chat v1 (which names `legal`, pinned at v1)."""
    legal = legal_whitelist(users["agent"])
    staging, prod = pools(users["sre"])
    (v1, v2) = versions(users["sre"], {}, {"temperature": {"strict": 0.2}})
    node_create(actor=users["sre"], name="stg-1", pool=staging)
    stage(users["sre"], staging, v1, reason="first")
    pool_publish(actor=users["sre"], pool=prod, version=v1, reason="first")
    return {**users, "legal": legal, "staging": staging, "prod": prod, "v1": v1, "v2": v2}


def test_a_release_pins_the_latest_version_of_each_whitelist_its_version_names(fleet):
    release = PoolRelease.objects.filter(pool=fleet["prod"]).get()
    assert whitelist_pins.pins_summary(whitelist_pins.release_pins(release)) == {"legal": 1}
    whitelist_create(actor=fleet["agent"], name="unused", scenarios=["x"])
    assert whitelists(fleet["prod"]) == {"legal": ["legal", "legal_policy"]}, "only the whitelists it names"


def test_an_agents_whitelist_edit_changes_staging_at_once_and_production_not_at_all(
    fleet, settings, django_capture_on_commit_callbacks
):
    settings.CHANNEL_LAYERS = IN_MEMORY
    layer = get_channel_layer()

    async def join(group: str) -> str:
        channel = await layer.new_channel()
        await layer.group_add(group, channel)
        return channel

    prod_agent, staging_agent = async_to_sync(join)("agents.prod-main"), async_to_sync(join)("agents.staging")
    prod_before = policy_bundle(fleet["prod"])
    with django_capture_on_commit_callbacks(execute=True):
        edit(fleet["agent"], fleet["legal"], ["legal", "legal_policy", "contract"])

    async def next_event(channel: str) -> dict | None:
        try:
            return await asyncio.wait_for(layer.receive(channel), 2)
        except TimeoutError:
            return None

    assert whitelists(fleet["staging"]) == {"legal": ["legal", "legal_policy", "contract"]}
    staging_push = async_to_sync(next_event)(staging_agent)
    assert json.loads(staging_push["text"])["content"]["whitelists"]["legal"][-1] == "contract"
    assert policy_bundle(fleet["prod"]) == prod_before
    assert async_to_sync(next_event)(prod_agent) is None, "production agents are sent nothing"


def test_the_pool_shows_what_changed_and_a_republish_picks_it_up(fleet):
    sre, prod = fleet["sre"], fleet["prod"]
    edit(fleet["agent"], fleet["legal"], ["legal", "contract"])
    prod.refresh_from_db()
    assert whitelist_pins.pool_whitelist_changes(prod) == [{"whitelist": "legal", "pinned": 1, "latest": 2}]
    assert whitelist_pins.pool_whitelist_changes(fleet["staging"]) == [], "staging follows the latest versions"

    release = pool_publish(actor=sre, pool=prod, version=fleet["v1"], reason="legal now covers contracts")
    assert (release.kind, release.version, release.previous_version) == ("publish", fleet["v1"], fleet["v1"])
    assert whitelists(prod) == {"legal": ["legal", "contract"]}
    prod.refresh_from_db()
    assert whitelist_pins.pool_whitelist_changes(prod) == []
    entry = AuditEntry.objects.filter(action="pool.publish", target_id=str(prod.pk)).order_by("-id").first()
    assert (entry.before["whitelists"], entry.after["whitelists"]) == ({"legal": 1}, {"legal": 2})
    assert entry.actor == sre

    with pytest.raises(Conflict, match="whitelists are current"):
        pool_publish(actor=sre, pool=prod, version=fleet["v1"], reason="again")
    with pytest.raises(Conflict, match="follows the latest whitelists"):
        stage(sre, fleet["staging"], fleet["v1"], reason="pointless on staging")


def test_a_rollback_returns_to_the_old_pins(fleet):
    sre, prod = fleet["sre"], fleet["prod"]
    edit(fleet["agent"], fleet["legal"], ["legal", "contract"])
    pool_publish(actor=sre, pool=prod, version=fleet["v1"], reason="republish with legal v2")
    assert whitelists(prod) == {"legal": ["legal", "contract"]}

    # The previous state is v1 with legal v1: the default rollback and naming the current version both go there.
    back = pool_rollback(actor=sre, pool=prod, reason="contracts need review")
    assert (back.version, whitelist_pins.pins_summary(whitelist_pins.release_pins(back))) == (fleet["v1"], {"legal": 1})
    assert whitelists(prod) == {"legal": ["legal", "legal_policy"]}
    forth = pool_rollback(actor=sre, pool=prod, version=fleet["v1"], reason="reviewed after all")
    assert whitelist_pins.pins_summary(whitelist_pins.release_pins(forth)) == {"legal": 2}

    # A later version, then back to v1 by name: its newest release's pins (legal v2), not the latest ones (v3).
    stage(sre, fleet["staging"], fleet["v2"], reason="try v2")
    edit(fleet["agent"], fleet["legal"], ["legal"])
    pool_publish(actor=sre, pool=prod, version=fleet["v2"], reason="v2 with legal v3")
    assert whitelists(prod) == {"legal": ["legal"]}
    pool_rollback(actor=sre, pool=prod, version=fleet["v1"], reason="v2 misbehaves")
    assert whitelists(prod) == {"legal": ["legal", "contract"]}


def test_the_production_gate_covers_whitelist_versions_never_in_effect_on_staging(fleet):
    sre, agent, prod, staging = fleet["sre"], fleet["agent"], fleet["prod"], fleet["staging"]
    vip = whitelist_create(actor=agent, name="vip", scenarios=["vip"])
    (v3,) = [
        template_version_create(
            actor=sre,
            template=fleet["v1"].template,
            document={"inference_params": {"max_tokens": {"whitelist": ["legal", "vip"]}}},
            base_number=2,
        )
    ]
    stage(sre, staging, v3, reason="try vip")
    pool_publish(actor=sre, pool=prod, version=v3, reason="vip v1 ran on staging")
    # Staging moves on to a version without vip; vip's next edit then takes effect on no non-production pool.
    stage(sre, staging, fleet["v2"], reason="back to legal only")
    edit(agent, vip, ["vip", "gold"])
    with pytest.raises(ProductionGateClosed, match="vip v2 never took effect on a non-production pool"):
        pool_publish(actor=sre, pool=prod, version=v3, reason="pick up vip v2")
    release = pool_publish(actor=sre, pool=prod, version=v3, reason="pick up vip v2", override_reason="urgent")
    assert release.override_reason == "urgent"
    assert whitelists(prod)["vip"] == ["vip", "gold"]
    # A legal edit reaches staging (which names legal) at once, so it passes the gate without an override.
    edit(agent, fleet["legal"], ["legal"])
    assert pool_publish(actor=sre, pool=prod, version=v3, reason="legal v2").override_reason == ""


@pytest.fixture
def canary(fleet):
    """prod-main with gpu-1..gpu-3 on v1 (legal v1); legal edited to v2; v2 published: gpu-1 is the canary."""
    sre, prod = fleet["sre"], fleet["prod"]
    Pool.objects.filter(pk=prod.pk).update(canary_stages=[{"nodes": 1}, {"percent": 100}])
    nodes = [node_create(actor=sre, name=f"gpu-{i}", pool=prod)[0] for i in range(1, 4)]
    EngineNode.objects.update(is_connected=True, applied_hash=fleet["v1"].content_hash, applied_version=fleet["v1"])
    edit(fleet["agent"], fleet["legal"], ["legal", "contract"])
    stage(sre, fleet["staging"], fleet["v2"], reason="staging first")
    pool_publish(actor=sre, pool=Pool.objects.get(pk=prod.pk), version=fleet["v2"], reason="v2 with legal v2")
    return {**fleet, "nodes": nodes, "rollout": Rollout.objects.get(pool=prod)}


def test_canary_nodes_use_the_rollouts_pins_and_the_others_keep_the_old_ones(canary):
    prod = Pool.objects.get(pk=canary["prod"].pk)
    assert canary["rollout"].canary_nodes == ["gpu-1"]
    assert whitelists(prod, canary=True) == {"legal": ["legal", "contract"]}
    assert whitelists(prod) == {"legal": ["legal", "legal_policy"]}

    message = policy_message(prod)
    assert json.loads(message["text"])["content"]["whitelists"] == {"legal": ["legal", "legal_policy"]}
    assert message["canary"]["nodes"] == ["gpu-1"]
    assert json.loads(message["canary"]["text"])["content"]["whitelists"] == {"legal": ["legal", "contract"]}
    # An agent (re)connecting gets its own: the canary node the new pins, the others the old ones.
    canary_text, canary_hash, _ = agent_policy.policy_text(pool_name=prod.name, node_name="gpu-1")
    other_text, other_hash, _ = agent_policy.policy_text(pool_name=prod.name, node_name="gpu-2")
    assert (canary_hash, other_hash) == (message["canary"]["hash"], message["hash"])
    assert json.loads(canary_text) == json.loads(message["canary"]["text"])
    assert json.loads(other_text) == json.loads(message["text"])


def test_aborting_the_canary_returns_every_node_to_the_old_pins(canary):
    rollouts.rollout_abort(actor=canary["sre"], rollout=canary["rollout"], reason="no")
    prod = Pool.objects.get(pk=canary["prod"].pk)
    release = whitelist_pins.latest_release(prod)
    assert (release.kind, release.version) == ("rollback", canary["v1"])
    assert whitelist_pins.pins_summary(whitelist_pins.release_pins(release)) == {"legal": 1}
    assert whitelists(prod) == whitelists(prod, canary=True) == {"legal": ["legal", "legal_policy"]}
    assert policy_message(prod)["canary"] is None


def test_the_last_stage_gives_every_node_the_new_pins(canary):
    rollouts.rollout_promote(actor=canary["sre"], rollout=canary["rollout"], reason="looks fine")
    prod = Pool.objects.get(pk=canary["prod"].pk)
    message = policy_message(prod)
    assert sorted(message["canary"]["nodes"]) == ["gpu-1", "gpu-2", "gpu-3"]
    EngineNode.objects.update(applied_hash=canary["v2"].content_hash, applied_version=canary["v2"])
    rollouts.rollout_step(rollout_id=canary["rollout"].pk)  # every node ACKed: the stage's window starts
    rollouts.rollout_step(rollout_id=canary["rollout"].pk)  # the last stage ends once every node ACKed
    assert Rollout.objects.get(pk=canary["rollout"].pk).state == "succeeded"
    assert whitelists(prod) == {"legal": ["legal", "contract"]}
    assert policy_message(prod)["canary"] is None


def test_the_api_and_the_pool_page_show_pins_and_what_a_republish_would_pick_up(fleet, api_for, client):
    edit(fleet["agent"], fleet["legal"], ["legal", "contract"])
    api = api_for("sre")
    prod = api.get("/api/v1/pools/prod-main/").json()
    assert (prod["whitelists"], prod["whitelist_changes"]) == (
        {"legal": 1},
        [{"whitelist": "legal", "pinned": 1, "latest": 2}],
    )
    staging = api.get("/api/v1/pools/staging/").json()
    assert (staging["whitelists"], staging["whitelist_changes"]) == (None, [])

    client.force_login(fleet["sre"])
    page = client.get("/pools/prod-main/").content.decode()
    assert "Whitelists changed since the current release" in page
    assert "chat v1 (current: republish with the latest whitelists)" in page

    published = api.post(
        "/api/v1/pools/prod-main/publish/",
        {"template": "chat", "version": 1, "reason": "legal covers contracts now"},
        format="json",
    )
    assert published.status_code == 201, published.content
    assert published.json()["whitelists"] == {"legal": 2}
    assert api.get("/api/v1/pools/prod-main/").json()["whitelist_changes"] == []
    timeline = api.get("/api/v1/pools/prod-main/releases/").json()["results"]
    assert [r["whitelists"] for r in timeline] == [{"legal": 2}, {"legal": 1}]

    preview = api.get("/api/v1/pools/prod-main/rollback-preview/").json()
    assert (preview["target"]["number"], preview["changes"], preview["whitelists"]) == (
        1,
        [],
        [{"whitelist": "legal", "before": 2, "after": 1}],
    )
    page = client.get("/pools/prod-main/rollback/?version=chat:1").content.decode()
    assert "legal</span>: v2 → v1" in page
    assert "Whitelists changed" not in client.get("/pools/prod-main/").content.decode()


def test_tuning_staff_cannot_republish(fleet, api_for):
    edit(fleet["agent"], fleet["legal"], ["legal", "contract"])
    refused = api_for("agent").post(
        "/api/v1/pools/prod-main/publish/", {"template": "chat", "version": 1, "reason": "me too"}, format="json"
    )
    assert refused.status_code == 403
    assert whitelists(fleet["prod"]) == {"legal": ["legal", "legal_policy"]}


def test_the_data_migration_pins_the_current_versions_of_existing_releases(fleet):
    from django.apps import apps

    migration = importlib.import_module("controlplane.nodes.migrations.0009_release_whitelist_pins")
    edit(fleet["agent"], fleet["legal"], ["legal", "contract"])
    for release in PoolRelease.objects.all():
        release.whitelist_versions.clear()  # as releases were before pins existed
    migration.pin_current_versions(apps, None)
    assert {
        release.pool.name: whitelist_pins.pins_summary(whitelist_pins.release_pins(release))
        for release in PoolRelease.objects.all()
    } == {"staging": {"legal": 2}, "prod-main": {"legal": 2}}
