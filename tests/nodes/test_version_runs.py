"""The production gate: a version has run on non-production once a node there ACKed it and stayed healthy on it for
the pool's soak window. Services and the watch pass with a fake clock (`now`), agents' reports through the same
services the agent consumer calls."""

import importlib
import re
import time
from datetime import timedelta

import pytest
from django.apps import apps
from django.utils import timezone

from controlplane.alerts.defaults import install_default_rules
from controlplane.alerts.evaluation import evaluate
from controlplane.alerts.models import AlertRule, AlertRuleVersion
from controlplane.audit.models import AuditEntry
from controlplane.metrics.models import MetricSample
from controlplane.nodes.exceptions import ProductionGateClosed
from controlplane.nodes.gate import version_gate
from controlplane.nodes.models import EngineNode, Pool, VersionRun
from controlplane.nodes.services import agent_sessions
from controlplane.nodes.services.canary_settings import pool_canary_update
from controlplane.nodes.services.engine_nodes import node_create
from controlplane.nodes.services.pools import pool_publish
from controlplane.nodes.services.version_runs import version_runs_watch
from tests.alerts.conftest import blank_sample
from tests.factories import pools, template_with_versions
from tests.helpers import state_snapshot

pytestmark = pytest.mark.django_db

WARMUP_FAILED = "warmup failed: p99 3.04 s > 2 s over the first 100 requests"


@pytest.fixture
def world(sre):
    """Pools staging (v1 published) and prod-main; node gpu-1 of staging connected and online, on nothing yet."""
    staging, prod = pools(sre)
    _, versions = template_with_versions(sre, temperatures=(0.3, 0.2, 0.1))
    pool_publish(actor=sre, pool=staging, version=versions[0], reason="stage it")
    node, _ = node_create(actor=sre, name="gpu-1", pool=staging)
    agent_sessions.node_hello(node_id=node.pk, session_id="s1", hello={"status": "online"})
    return {"staging": staging, "prod": prod, "versions": versions, "node": node}


def ack(node, version) -> EngineNode:
    agent_sessions.nodes_config_acked(node_ids=[node.pk], content_hash=version.content_hash, version_id=version.pk)
    return EngineNode.objects.get(pk=node.pk)


def nack(node, version, error=WARMUP_FAILED) -> None:
    ref = {"template": version.template.name, "number": version.number}  # as the agent names what it refused
    agent_sessions.node_config_result(
        node_id=node.pk, ok=False, content_hash=version.content_hash, version=ref, error=error
    )


def beat(node, at) -> None:
    """The node's heartbeats up to `at` (what the consumer's batched `last_seen_at` update records)."""
    EngineNode.objects.filter(pk=node.pk).update(last_seen_at=at)


def watch_at(node, at, *, heartbeat=True) -> None:
    if heartbeat:
        beat(node, at)
    version_runs_watch(now=at)


def runs(version) -> list[tuple[str, str]]:
    return [(r.state, r.reason) for r in VersionRun.objects.filter(version=version).order_by("started_at", "id")]


def set_soak(sre, pool, seconds: int) -> Pool:
    return pool_canary_update(
        actor=sre,
        pool=pool,
        canary_stages=pool.canary_stages,
        analysis_window_s=pool.analysis_window_s,
        soak_s=seconds,
        reason="test window",
    )


def test_a_nack_on_staging_refuses_production_with_the_nodes_error(sre, world):
    v1 = world["versions"][0]
    nack(world["node"], v1)
    before = state_snapshot()
    with pytest.raises(ProductionGateClosed) as caught:
        pool_publish(actor=sre, pool=world["prod"], version=v1, reason="promote")
    assert caught.value.message == (
        f"version: chat v1 has not run on a non-production pool yet: NACKed on staging by gpu-1: {WARMUP_FAILED}; "
        "publish a version that staging accepts; or an SRE gives override_reason"
    )
    assert caught.value.detail[0] == {"path": "version", "message": f"NACKed on staging by gpu-1: {WARMUP_FAILED}"}
    assert state_snapshot() == before
    assert runs(v1) == [("nacked", WARMUP_FAILED)]


def test_acked_but_not_for_the_window_is_refused_with_the_time_left(sre, world):
    v1 = world["versions"][0]
    set_soak(sre, world["staging"], 120)
    node = ack(world["node"], v1)
    with pytest.raises(ProductionGateClosed) as caught:
        pool_publish(actor=sre, pool=world["prod"], version=v1, reason="promote")
    assert re.fullmatch(
        r"version: chat v1 has not run on a non-production pool yet: on staging: gpu-1 for [01] s of 2 min; "
        r"it counts once it has run healthy for the whole window, in (2 min|1 min 59 s); "
        r"or an SRE gives override_reason",
        caught.value.message,
    ), caught.value.message
    # A minute later by the watch's clock: half way.
    watch_at(node, node.applied_at + timedelta(seconds=60))
    gate = version_gate(version=v1, now=node.applied_at + timedelta(seconds=60))
    assert (gate.has_run, gate.summary, gate.retry_in_s) == (False, "on staging: gpu-1 for 1 min of 2 min", 60.0)
    assert Pool.objects.get(pk=world["prod"].pk).desired_version is None


def test_acked_and_healthy_for_the_window_is_allowed(sre, world):
    v1 = world["versions"][0]
    set_soak(sre, world["staging"], 1)
    ack(world["node"], v1)
    time.sleep(1.2)
    agent_sessions.node_heartbeat(node_id=world["node"].pk, heartbeat={"status": "online"})
    release = pool_publish(actor=sre, pool=world["prod"], version=v1, reason="promote")
    assert (release.version, release.override_reason) == (v1, "")
    run = VersionRun.objects.get(version=v1)
    assert (run.state, run.node_name, run.pool.name, run.window_s) == ("passed", "gpu-1", "staging", 1)
    assert run.passed_at == run.started_at + timedelta(seconds=1)
    assert run.started_at == EngineNode.objects.get(pk=world["node"].pk).applied_at  # counted from the ACK


def test_the_watch_passes_a_run_at_the_end_of_its_window_and_the_gate_says_where_it_ran(world):
    v1 = world["versions"][0]
    node = ack(world["node"], v1)
    start = node.applied_at
    watch_at(node, start + timedelta(seconds=299))
    assert runs(v1) == [("soaking", "")]
    watch_at(node, start + timedelta(seconds=301))
    assert runs(v1) == [("passed", "")]
    gate = version_gate(version=v1)
    assert gate.has_run
    assert gate.summary.startswith("ran on staging: gpu-1 healthy for 5 min from ")
    # Passed stays passed: the node moving on later is noted, not held against the version.
    watch_at(ack(node, world["versions"][1]), start + timedelta(seconds=400))
    run = VersionRun.objects.get(version=v1)
    assert (run.state, run.reason) == ("passed", "it moved to chat v2")
    assert version_gate(version=v1).has_run


def test_a_node_lost_before_the_window_is_over_fails_the_run_and_a_later_healthy_spell_counts_anew(world):
    v1 = world["versions"][0]
    node = ack(world["node"], v1)
    start = node.applied_at
    watch_at(node, start + timedelta(seconds=30))
    watch_at(node, start + timedelta(seconds=60), heartbeat=False)  # silent for 30 s: lost
    [(state, reason)] = runs(v1)
    assert state == "failed" and reason.startswith("the node was lost (no heartbeat since ")
    gate = version_gate(version=v1, now=start + timedelta(seconds=60))
    assert gate.summary.startswith("on staging: gpu-1 ran it for 30 s of 5 min, then the node was lost")
    assert gate.advice == "it counts once a node of staging runs it healthy for 5 min"

    back = start + timedelta(seconds=100)
    watch_at(node, back)
    assert runs(v1) == [("failed", reason), ("soaking", "")]
    assert VersionRun.objects.get(version=v1, state="soaking").started_at == back
    watch_at(node, back + timedelta(seconds=300))
    assert runs(v1)[-1] == ("passed", "")


def test_a_critical_alert_on_the_node_fails_the_run_even_between_two_passes(world):
    install_default_rules(AlertRule, AlertRuleVersion)
    v1 = world["versions"][0]
    node = ack(world["node"], v1)
    start = node.applied_at
    watch_at(node, start + timedelta(seconds=2))
    # P99 above the critical line (2 s) for the rule's 10 s: critical fires; then it recovers, all between passes.
    for second in range(4, 20, 2):
        at = start + timedelta(seconds=second)
        value = 2.5 if second < 16 else 0.5
        MetricSample.objects.create(
            scope="node", name="gpu-1", pool="staging", t=at, resolution_s=1, values=blank_sample(latency_p99_s=value)
        )
        beat(node, at)
        evaluate(now=at)
    watch_at(node, start + timedelta(seconds=20))
    (state, reason), now = runs(v1)
    assert state == "failed"
    assert re.fullmatch(r"critical alert p99-latency on gpu-1 at \d\d:\d\d:\d\d \w+", reason), reason
    assert now == ("soaking", "")  # healthy again since the alert resolved: counted from this pass


def test_a_repeated_ack_keeps_the_run_and_another_version_ends_it(world):
    v1, v2, _ = world["versions"]
    node = ack(world["node"], v1)
    start = node.applied_at
    watch_at(node, start + timedelta(seconds=10))
    assert ack(node, v1).applied_at == start  # a push to the whole pool that the node already runs
    watch_at(node, start + timedelta(seconds=20))
    assert runs(v1) == [("soaking", "")]
    watch_at(ack(node, v2), start + timedelta(seconds=30))
    assert runs(v1) == [("failed", "it moved to chat v2")]
    assert runs(v2) == [("soaking", "")]


def test_trying_another_config_breaks_the_run_of_the_one_kept(world):
    v1, v2, _ = world["versions"]
    node = ack(world["node"], v1)
    start = node.applied_at
    watch_at(node, start + timedelta(seconds=10))
    nack(node, v2)  # a cold change: drained, restarted, warmed, failed, restarted on v1 and warming up again
    agent_sessions.node_heartbeat(node_id=node.pk, heartbeat={"status": "warming"})
    watch_at(node, start + timedelta(seconds=20))
    [(state, reason)] = runs(v1)
    assert state == "failed"
    assert reason.startswith("it tried another config at ") and reason.endswith(f"(NACKed: {WARMUP_FAILED})")
    agent_sessions.node_heartbeat(node_id=node.pk, heartbeat={"status": "online"})
    watch_at(node, start + timedelta(seconds=40))
    assert runs(v1)[-1] == ("soaking", "")  # back on v1 and serving: counted anew
    assert VersionRun.objects.get(version=v1, state="soaking").started_at == start + timedelta(seconds=40)
    assert runs(v2) == [("nacked", WARMUP_FAILED)]


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"reported_status": "degraded"}, "its engine is degraded (crashed or failed to start)"),
        ({"warmup_state": "failed", "warmup_progress": {"reason": "p99 2.4 s > 2 s"}}, "a warmup failed at "),
        ({"is_connected": False}, "the node was lost ("),
    ],
)
def test_an_unhealthy_node_fails_the_run(world, change, reason):
    v1 = world["versions"][0]
    node = ack(world["node"], v1)
    at = node.applied_at + timedelta(seconds=30)
    if "warmup_state" in change:
        change = {**change, "warmup_failed_at": at}
    EngineNode.objects.filter(pk=node.pk).update(**change)
    watch_at(node, at)
    [(state, got)] = runs(v1)
    assert state == "failed" and got.startswith(reason), got


def test_a_node_already_on_a_version_counts_from_its_recorded_ack(world):
    v1 = world["versions"][0]
    node = ack(world["node"], v1)
    ten_minutes_ago = timezone.now() - timedelta(minutes=10)
    EngineNode.objects.filter(pk=node.pk).update(applied_at=ten_minutes_ago)  # ACKed before the gate watched
    version_runs_watch()
    run = VersionRun.objects.get(version=v1)
    assert (run.state, run.started_at, run.passed_at) == (
        "passed",
        ten_minutes_ago,
        ten_minutes_ago + timedelta(seconds=300),
    )


def test_production_nodes_are_no_evidence(sre, world):
    v1 = world["versions"][0]
    prod_node, _ = node_create(actor=sre, name="gpu-prod", pool=world["prod"])
    agent_sessions.node_hello(node_id=prod_node.pk, session_id="p1", hello={"status": "online"})
    node = ack(prod_node, v1)
    watch_at(node, node.applied_at + timedelta(seconds=600))
    nack(prod_node, world["versions"][1])
    assert not VersionRun.objects.exists()


def test_an_override_still_publishes_and_the_audit_says_what_it_skipped(sre, world):
    v1 = world["versions"][0]
    nack(world["node"], v1)
    release = pool_publish(
        actor=sre, pool=world["prod"], version=v1, reason="hotfix", override_reason="incident 42, staging broken"
    )
    assert release.override_reason == "incident 42, staging broken"
    entry = AuditEntry.objects.filter(action="pool.publish", target_id=str(world["prod"].pk)).get()
    assert entry.after["override_reason"] == "incident 42, staging broken"
    assert entry.after["production_gate"] == f"NACKed on staging by gpu-1: {WARMUP_FAILED}"


def test_the_migration_keeps_nacks_recorded_before_the_gate(world):
    v1 = world["versions"][0]
    EngineNode.objects.filter(pk=world["node"].pk).update(
        last_nack_hash=v1.content_hash, last_nack_error="max_model_len too large", last_nack_at=timezone.now()
    )
    migration = importlib.import_module("controlplane.nodes.migrations.0007_version_runs")
    migration.record_nacks(apps, None)
    assert runs(v1) == [("nacked", "max_model_len too large")]


def test_an_ack_the_watch_has_not_looked_at_yet_says_so(sre, world):
    v1 = world["versions"][0]
    ack(world["node"], v1)
    gate = version_gate(version=v1)
    assert (gate.has_run, gate.summary, gate.advice) == (
        False,
        "gpu-1 of staging runs it, not yet watched",
        "the gate's watch starts counting at its next pass (every 5 s)",
    )
    v2 = world["versions"][1]
    assert version_gate(version=v2).summary == "it was never published to a non-production pool"
    pool_publish(actor=sre, pool=world["staging"], version=v2, reason="next")
    assert re.fullmatch(
        r"published to staging at \d\d:\d\d:\d\d UTC, but no node of it has ACKed it yet",
        version_gate(version=v2).summary,
    )
