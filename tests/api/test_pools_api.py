"""Pools over REST: publish, the production gate and its override, rollbacks, previews and the timeline."""

import pytest

from controlplane.nodes.models import Pool, PoolRelease
from controlplane.params.services.templates import template_version_create
from tests.factories import ran_healthy
from tests.helpers import state_snapshot

pytestmark = pytest.mark.django_db


def publish(client, pool: str, version: int, reason="release", **extra):
    body = {"template": "chat", "version": version, "reason": reason, **extra}
    return client.post(f"/api/v1/pools/{pool}/publish/", body, format="json")


def rollback(client, pool: str, reason="regression", **target):
    return client.post(f"/api/v1/pools/{pool}/rollback/", {"reason": reason, **target}, format="json")


def desired(pool: str):
    return Pool.objects.select_related("desired_version").get(name=pool).desired_version


@pytest.fixture
def v3(world, agent):
    """A third version of `chat` that changes a cold field, never published anywhere."""
    document = {
        "inference_params": {
            "temperature": {"strict": 0.2},
            "max_tokens": {"whitelist": []},
            "engine": {"max_num_seqs": 32},
        }
    }
    return template_version_create(actor=agent, template=world["template"], document=document, base_number=2)


def test_publish_sets_the_desired_version(world, api_for, v3):
    response = publish(api_for("sre"), "staging", 3, reason="fewer sequences")
    assert response.status_code == 201, response.content
    release = response.json()
    assert (release["kind"], release["actor"], release["reason"]) == ("publish", "sre", "fewer sequences")
    assert release["version"] == {"template": "chat", "number": 3, "hash": v3.content_hash}
    assert release["previous_version"]["number"] == 2
    pool = api_for("oncall").get("/api/v1/pools/staging/").json()
    assert pool["desired_version"] == {"template": "chat", "number": 3, "hash": v3.content_hash}


def test_publishing_the_running_version_is_409(world, api_for):
    before = state_snapshot()
    response = publish(api_for("sre"), "staging", 2)
    assert response.status_code == 409
    assert "already the desired version" in response.json()["error"]
    assert state_snapshot() == before


def test_publish_of_unknown_version_is_404(world, api_for):
    assert publish(api_for("sre"), "staging", 9).status_code == 404
    assert api_for("sre").post("/api/v1/pools/nowhere/publish/", {}, format="json").status_code == 404


def test_production_gate_refuses_a_version_not_yet_on_a_non_production_pool(world, api_for, v3):
    before = state_snapshot()
    response = publish(api_for("sre"), "prod-main", 3)
    assert response.status_code == 409
    body = response.json()
    assert body["code"] == "production_gate"
    assert body["error"].startswith(
        "version: chat v3 has not run on a non-production pool yet: it was never published to a non-production pool"
    )
    assert body["detail"][0] == {"path": "version", "message": "it was never published to a non-production pool"}
    assert state_snapshot() == before


def test_production_gate_refuses_a_version_published_to_staging_but_not_acked(world, api_for):
    response = publish(api_for("sre"), "prod-main", 2, reason="promote")
    assert response.status_code == 409
    assert "published to staging at " in response.json()["error"]
    assert "but no node of it has ACKed it yet; wait for a node to ACK it" in response.json()["error"]
    assert desired("prod-main") is None


def test_production_gate_opens_once_staging_ran_the_version(world, api_for):
    ran_healthy(world["node"], world["v2"])
    gate = api_for("oncall").get("/api/v1/pools/prod-main/gate/", {"template": "chat", "version": 2}).json()
    assert (gate["has_run"], gate["allowed"], gate["advice"]) == (True, True, "")
    assert gate["summary"].startswith("ran on staging: gpu-1 healthy for 5 min from ")
    assert [(r["pool"], r["node"], r["state"], r["window_s"]) for r in gate["runs"]] == [
        ("staging", "gpu-1", "passed", 300)
    ]
    response = publish(api_for("sre"), "prod-main", 2, reason="promote")
    assert response.status_code == 201, response.content
    assert response.json()["override_reason"] == ""
    assert desired("prod-main") == world["v2"]


@pytest.mark.parametrize("role", ["sre", "admin"])
def test_override_reason_lets_an_sre_through_and_is_recorded(world, api_for, v3, role):
    response = publish(api_for(role), "prod-main", 3, reason="hotfix", override_reason="incident 42; staging down")
    assert response.status_code == 201, response.content
    assert response.json()["override_reason"] == "incident 42; staging down"
    assert desired("prod-main") == v3
    timeline = api_for("oncall").get("/api/v1/pools/prod-main/releases/").json()["results"]
    assert timeline[0]["override_reason"] == "incident 42; staging down"
    entry = api_for("oncall").get("/api/v1/audit/", {"action": "pool.publish"}).json()["results"][0]
    assert entry["after"]["override_reason"] == "incident 42; staging down"
    assert entry["actor"] == role


@pytest.mark.parametrize("role", ["agent", "oncall"])
def test_roles_without_publish_rights_cannot_publish_at_all(world, api_for, role):
    before = state_snapshot()
    staging = publish(api_for(role), "staging", 1)
    prod = publish(api_for(role), "prod-main", 2, override_reason="trust me")
    assert (staging.status_code, prod.status_code) == (403, 403)
    assert state_snapshot() == before


def test_rollback_to_previous(world, api_for):
    response = rollback(api_for("sre"), "staging", reason="v2 hurts latency")
    assert response.status_code == 201, response.content
    release = response.json()
    assert (release["kind"], release["version"]["number"], release["previous_version"]["number"]) == ("rollback", 1, 2)
    assert desired("staging") == world["v1"]


def test_rollback_to_any_earlier_version(world, api_for, v3):
    publish(api_for("sre"), "staging", 3)
    response = rollback(api_for("admin"), "staging", template="chat", version=1)
    assert response.status_code == 201, response.content
    assert desired("staging") == world["v1"]
    # ...and forward again to a version it also ran.
    assert rollback(api_for("sre"), "staging", template="chat", version=3).status_code == 201
    assert desired("staging") == v3


def test_rollback_to_a_version_the_pool_never_ran_is_400(world, api_for, v3):
    before = state_snapshot()
    response = rollback(api_for("sre"), "staging", template="chat", version=3)
    assert response.status_code == 400
    body = response.json()
    assert body["detail"] == [{"path": "version", "message": "chat v3 never ran on staging; publish it instead"}]
    assert state_snapshot() == before


def test_rollback_with_nothing_to_return_to_is_409(world, api_for):
    before = state_snapshot()
    response = rollback(api_for("sre"), "prod-main")
    assert response.status_code == 409
    assert response.json()["code"] == "nothing_to_roll_back"
    assert state_snapshot() == before


def test_rollback_preview_lists_field_changes_with_hot_and_cold(world, api_for, v3):
    publish(api_for("sre"), "staging", 3)
    client = api_for("oncall")
    before = state_snapshot()
    previous = client.get("/api/v1/pools/staging/rollback-preview/").json()
    assert previous == {
        "target": {"template": "chat", "number": 2, "hash": world["v2"].content_hash},
        "needs_restart": True,
        "changes": [{"path": "engine.max_num_seqs", "old": 32, "new": 64, "apply": "cold"}],
    }
    to_v1 = client.get("/api/v1/pools/staging/rollback-preview/", {"template": "chat", "version": 1}).json()
    assert to_v1["target"]["number"] == 1
    assert to_v1["needs_restart"] is True
    assert [(c["path"], c["old"], c["new"], c["apply"]) for c in to_v1["changes"]] == [
        ("temperature.strict", 0.2, 0.3, "hot"),
        ("engine.max_num_seqs", 32, 64, "cold"),
    ]
    assert state_snapshot() == before, "a preview must not change anything"


def test_hot_only_rollback_preview_needs_no_restart(world, api_for):
    preview = api_for("agent").get("/api/v1/pools/staging/rollback-preview/").json()
    assert preview["needs_restart"] is False
    assert preview["changes"] == [{"path": "temperature.strict", "old": 0.2, "new": 0.3, "apply": "hot"}]


def test_rollback_preview_without_history_is_empty(world, api_for):
    preview = api_for("agent").get("/api/v1/pools/prod-main/rollback-preview/").json()
    assert preview == {"target": None, "needs_restart": False, "changes": []}


def test_history_timeline_is_newest_first(world, api_for, v3):
    publish(api_for("sre"), "staging", 3, reason="third")
    rollback(api_for("sre"), "staging", reason="fourth")
    rows = api_for("oncall").get("/api/v1/pools/staging/releases/").json()["results"]
    assert [(r["kind"], r["version"]["number"], r["reason"]) for r in rows] == [
        ("rollback", 2, "fourth"),
        ("publish", 3, "third"),
        ("publish", 2, "cooler strict tier"),
        ("publish", 1, "first rollout"),
    ]
    times = [r["created_at"] for r in rows]
    assert times == sorted(times, reverse=True)
    assert PoolRelease.objects.filter(pool__name="staging").count() == 4


def test_pool_list_puts_production_first(world, api_for):
    rows = api_for("oncall").get("/api/v1/pools/").json()["results"]
    assert [(r["name"], r["is_production"]) for r in rows] == [("prod-main", True), ("staging", False)]
    only_prod = api_for("oncall").get("/api/v1/pools/", {"is_production": "true"}).json()["results"]
    assert [r["name"] for r in only_prod] == ["prod-main"]
