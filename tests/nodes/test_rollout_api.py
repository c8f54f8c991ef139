"""The canary rollout over REST: reading it, pausing/resuming/promoting/aborting it, and the pool's canary settings."""

import pytest

from controlplane.audit.models import AuditEntry
from controlplane.nodes.models import EngineNode, Pool, Rollout
from controlplane.nodes.services.engine_nodes import node_create
from controlplane.nodes.services.pools import pool_publish
from tests.factories import pools, template_with_versions
from tests.helpers import error_paths, state_snapshot

pytestmark = pytest.mark.django_db

ROLLOUT = "/api/v1/pools/staging/rollout/"
CANARY = "/api/v1/pools/staging/canary/"


@pytest.fixture
def canary(sre):
    """staging with gpu-1..gpu-3 on v1, stages [1 node, 100 %], then v2 published: gpu-1 is the canary."""
    staging, _ = pools(sre)
    Pool.objects.filter(pk=staging.pk).update(canary_stages=[{"nodes": 1}, {"percent": 100}], analysis_window_s=30)
    _, (v1, v2) = template_with_versions(sre, temperatures=(0.3, 0.2))
    pool_publish(actor=sre, pool=staging, version=v1, reason="first")
    for i in range(1, 4):
        node_create(actor=sre, name=f"gpu-{i}", pool=staging)
    EngineNode.objects.update(is_connected=True, applied_hash=v1.content_hash, applied_version=v1)
    pool_publish(actor=sre, pool=Pool.objects.get(pk=staging.pk), version=v2, reason="cooler strict tier")
    return {"pool": staging, "v1": v1, "v2": v2, "rollout": Rollout.objects.get(pool=staging)}


def test_get_shows_the_running_canary(canary, api_for):
    body = api_for("oncall").get(ROLLOUT).json()
    assert body["state"] == "in_progress"  # the ACK view is unchanged
    rollout = body["canary"]
    assert (rollout["state"], rollout["stage_index"], rollout["stages"]) == (
        "running",
        0,
        [{"nodes": 1}, {"percent": 100}],
    )
    assert rollout["stage_nodes"] == [{"index": 0, "nodes": [{"name": "gpu-1", "acked": False, "nacked": False}]}]
    assert rollout["baseline_nodes"] == ["gpu-2", "gpu-3"]
    assert rollout["to_version"]["number"] == 2


def test_a_pool_that_never_had_a_canary_reads_null(sre, api_for):
    pools(sre)
    assert api_for("agent").get(ROLLOUT).json()["canary"] is None


def test_pause_resume_promote_then_abort_each_audited(canary, api_for):
    client = api_for("sre")
    for action, state in (("pause", "paused"), ("resume", "running"), ("promote", "running")):
        response = client.post(ROLLOUT, {"action": action, "reason": f"{action} it"}, format="json")
        assert response.status_code == 200, response.content
        assert response.json()["state"] == state
    assert response.json()["stage_index"] == 1
    assert [n["name"] for n in response.json()["stage_nodes"][1]["nodes"]] == ["gpu-2", "gpu-3"]
    response = client.post(ROLLOUT, {"action": "abort", "reason": "seen enough"}, format="json")
    assert response.json()["state"] == "aborted" and response.json()["is_active"] is False
    assert Pool.objects.get(name="staging").desired_version_id == canary["v1"].pk
    entries = AuditEntry.objects.filter(action__startswith="rollout.").order_by("id")
    assert list(entries.values_list("action", "reason", "actor_name")) == [
        ("rollout.pause", "pause it", "sre"),
        ("rollout.resume", "resume it", "sre"),
        ("rollout.promote", "promote it", "sre"),
        ("rollout.abort", "seen enough", "sre"),
    ]


def test_actions_that_do_not_apply_are_conflicts_and_change_nothing(canary, api_for):
    client = api_for("sre")
    before = state_snapshot()
    response = client.post(ROLLOUT, {"action": "resume", "reason": "go"}, format="json")
    assert response.status_code == 409 and "not paused" in response.json()["error"]
    assert state_snapshot() == before
    client.post(ROLLOUT, {"action": "abort", "reason": "stop"}, format="json")
    before = state_snapshot()
    response = client.post(ROLLOUT, {"action": "pause", "reason": "late"}, format="json")
    assert response.status_code == 409 and "no rollout under way" in response.json()["error"]
    assert state_snapshot() == before


@pytest.mark.parametrize(
    ("body", "path"),
    [
        ({"action": "pause"}, "reason"),
        ({"action": "pause", "reason": "  "}, "reason"),
        ({"action": "undo", "reason": "x"}, "action"),
        ({"action": "pause", "reason": "x", "force": True}, "force"),
    ],
)
def test_bad_action_bodies_name_the_field(canary, api_for, body, path):
    before = state_snapshot()
    response = api_for("sre").post(ROLLOUT, body, format="json")
    assert response.status_code == 400, response.content
    assert path in error_paths(response.json())
    assert state_snapshot() == before


def test_canary_settings_read_and_partial_update(sre, api_for):
    pools(sre)
    client = api_for("sre")
    body = client.get(CANARY).json()
    assert set(body) == {"canary_stages", "analysis_window_s", "soak_s"}
    assert body["soak_s"] == 300
    response = client.patch(CANARY, {"analysis_window_s": 45, "reason": "longer window"}, format="json")
    assert response.status_code == 200, response.content
    assert response.json() == {"canary_stages": body["canary_stages"], "analysis_window_s": 45, "soak_s": 300}
    stages = [{"nodes": 1}, {"percent": 25}, {"percent": 100}]
    response = client.patch(CANARY, {"canary_stages": stages, "reason": "three stages"}, format="json")
    assert response.json() == {"canary_stages": stages, "analysis_window_s": 45, "soak_s": 300}
    entry = AuditEntry.objects.filter(action="pool.canary_update").order_by("-id").first()
    assert (entry.actor_name, entry.reason, entry.after["canary_stages"]) == ("sre", "three stages", stages)
    response = client.patch(CANARY, {"soak_s": 600, "reason": "ten minutes on staging"}, format="json")
    assert response.json()["soak_s"] == 600
    entry = AuditEntry.objects.filter(action="pool.canary_update").order_by("-id").first()
    assert (entry.before["soak_s"], entry.after["soak_s"]) == (300, 600)


@pytest.mark.parametrize(
    ("body", "path"),
    [
        ({"canary_stages": [{"nodes": 1}], "reason": "x"}, "canary_stages"),
        ({"canary_stages": [{"percent": 50}, {"percent": 20}, {"percent": 100}], "reason": "x"}, "canary_stages"),
        ({"analysis_window_s": 0, "reason": "x"}, "analysis_window_s"),
        ({"soak_s": 0, "reason": "x"}, "soak_s"),
        ({"soak_s": 86401, "reason": "x"}, "soak_s"),
        ({"analysis_window_s": 30}, "reason"),
    ],
)
def test_bad_canary_settings_name_the_field(sre, api_for, body, path):
    pools(sre)
    before = state_snapshot()
    response = api_for("sre").patch(CANARY, body, format="json")
    assert response.status_code == 400, response.content
    assert path in error_paths(response.json()) or path in response.json()["error"]
    assert state_snapshot() == before
