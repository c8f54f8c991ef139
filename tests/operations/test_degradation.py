"""Pool degradation: the manual switch (reasons, audit, bundle) and the automatic path's hysteresis on a fake clock."""

import json
from datetime import UTC, datetime, timedelta

import pytest

from controlplane.audit.models import AuditEntry
from controlplane.lib.errors import Conflict, InvalidField
from controlplane.metrics.models import MetricSample
from controlplane.nodes.models import EngineNode, NodeCommand
from controlplane.nodes.services import engine_nodes
from controlplane.nodes.services import pools as pool_services
from controlplane.operations import degradation
from controlplane.operations.models import DegradationEvent, PoolDegradation
from controlplane.operations.policy_bundle import policy_bundle
from controlplane.operations.selectors import pool_history
from controlplane.params.services.templates import template_version_create
from tests.factories import template_with_versions

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


@pytest.fixture
def node(world):
    node, _ = engine_nodes.node_create(actor=world["sre"], name="gpu-1", pool=world["staging"])
    EngineNode.objects.filter(pk=node.pk).update(is_connected=True, connected_at=T0, last_seen_at=T0)
    return node


def sample(second: float, *, kv=0.5, gpu=0.5, sm=None, queue=0, name="gpu-1", pool="staging"):
    """One node sample at T0 + second, as the agent's 1 Hz telemetry writes it."""
    MetricSample.objects.create(
        scope=MetricSample.Scope.NODE,
        name=name,
        pool=pool,
        t=at(second),
        resolution_s=MetricSample.Resolution.SECOND,
        values={
            "kv_cache_usage": kv,
            "gpu_util": gpu,
            "sm_util": sm,
            "queue_depth_short": queue,
            "queue_depth_long": 0,
        },
    )


def ramp(loads: list[float], *, start: int = 0) -> list[DegradationEvent]:
    """One sample a second with KV-cache usage from `loads`, evaluating after each; the transitions made."""
    events = []
    for i, load in enumerate(loads):
        sample(start + i, kv=load)
        events += degradation.degradation_evaluate(now=at(start + i))
    return events


def state(pool) -> PoolDegradation:
    return PoolDegradation.objects.get(pool=pool)


# --- manual switch -------------------------------------------------------------------------------------------


def test_manual_degradation_needs_a_reason_and_is_audited_and_pushed(world, sent, django_capture_on_commit_callbacks):
    with pytest.raises(InvalidField):
        degradation.degradation_enable(actor=world["sre"], pool=world["staging"], reason="  ")
    with django_capture_on_commit_callbacks(execute=True):
        degradation.degradation_enable(actor=world["sre"], pool=world["staging"], reason="sales festival peak")
    s = state(world["staging"])
    assert (s.is_active, s.cause, s.reason, s.changed_by) == (True, "manual", "sales festival peak", world["sre"])
    entry = AuditEntry.objects.get(action="pool.degrade")
    assert (entry.actor, entry.reason, entry.after["active"]) == (world["sre"], "sales festival peak", True)
    ((_groups, event),) = [e for e in sent if e[1]["type"] == "policy.push"]
    assert event["pool"] == "staging"
    content = policy_bundle(world["staging"])["content"]["degradation"]
    assert (content["active"], content["cause"], content["reason"]) == (True, "manual", "sales festival peak")
    assert json.loads(event["text"])["content"]["degradation"]["active"] is True
    # prod-main is untouched.
    assert policy_bundle(world["prod"])["content"]["degradation"]["active"] is False

    with pytest.raises(Conflict):
        degradation.degradation_enable(actor=world["sre"], pool=world["staging"], reason="again")
    degradation.degradation_disable(actor=world["sre"], pool=world["staging"], reason="peak over")
    assert state(world["staging"]).is_active is False
    assert AuditEntry.objects.get(action="pool.degrade_end").reason == "peak over"
    with pytest.raises(Conflict):
        degradation.degradation_disable(actor=world["sre"], pool=world["staging"], reason="twice")
    kinds = [(e["kind"], e["degradation"].cause) for e in pool_history(pool=world["staging"]) if "degradation" in e]
    assert kinds == [("degradation-left", "manual"), ("degradation-entered", "manual")]


# --- automatic path ------------------------------------------------------------------------------------------


def test_enters_only_after_enter_after_s_above_the_threshold(world, node):
    # Defaults: enter above 0.8 for 30 s. 29 s above is not enough.
    assert ramp([0.9] * 30) == []
    assert state(world["staging"]).load_above_since == at(0)
    (event,) = ramp([0.9], start=30)
    assert (event.kind, event.cause) == ("entered", "automatic")
    assert "kv_cache_usage on gpu-1" in event.reason and "above 0.8" in event.reason
    entry = AuditEntry.objects.get(action="pool.degrade")
    assert (entry.actor, entry.actor_name) == (None, "system")


def test_a_dip_below_the_threshold_restarts_the_entry_clock(world, node):
    assert ramp([0.9] * 20 + [0.79] + [0.9] * 29) == []
    assert state(world["staging"]).load_above_since == at(21)
    assert [e.kind for e in ramp([0.9], start=51)] == ["entered"]


def test_no_flapping_around_the_thresholds_and_leaves_only_after_exit_after_s_below(world, node):
    ramp([0.95] * 31)
    assert state(world["staging"]).is_active
    # Load wobbling between the exit (0.6) and entry (0.8) lines, and around the entry line: no transition.
    assert ramp([0.7, 0.85, 0.62, 0.79, 0.81, 0.61] * 40, start=31) == []
    assert state(world["staging"]).is_active
    # Below 0.6 for up to 119 s: still degraded; a single reading at 0.65 restarts the exit clock.
    start = 31 + 240
    assert ramp([0.3] * 100 + [0.65] + [0.3] * 120, start=start) == []
    assert state(world["staging"]).load_below_since == at(start + 101)
    (event,) = ramp([0.3], start=start + 221)
    assert (event.kind, event.cause) == ("left", "automatic")
    assert "below 0.6 for 120 s" in event.reason
    assert AuditEntry.objects.filter(action="pool.degrade_end", actor__isnull=True).count() == 1


def test_stale_metrics_count_as_saturated(world, node):
    sample(0, kv=0.1, gpu=0.1)
    assert degradation.degradation_evaluate(now=at(4)) == []
    assert state(world["staging"]).load == pytest.approx(0.1)
    # The node's newest sample is 6 s old: it counts as 1.0 and the entry clock runs.
    assert degradation.degradation_evaluate(now=at(6)) == []
    assert state(world["staging"]).load == 1.0
    assert state(world["staging"]).load_above_since == at(6)
    (event,) = degradation.degradation_evaluate(now=at(36))
    assert "no fresh sample on gpu-1" in event.reason


def test_queue_saturation_is_depth_over_the_queue_limit(world, node):
    sample(0, kv=0.1, gpu=0.2, queue=230)  # 230 / 256 = 0.90
    degradation.degradation_evaluate(now=at(0))
    assert state(world["staging"]).load == pytest.approx(230 / 256)


def test_a_gpu_busy_with_one_sequence_is_not_load_but_sm_activity_is(world, node):
    """NVML's utilisation near 1.0 at a low KV cache and empty queues (one sequence decoding) enters no clock; DCGM's
    SM activity above the line does."""
    events = []
    for second in range(40):
        sample(second, kv=0.1, gpu=1.0)
        events += degradation.degradation_evaluate(now=at(second))
    assert events == [] and state(world["staging"]).load == pytest.approx(0.1)
    sample(40, kv=0.1, gpu=1.0, sm=0.9)
    degradation.degradation_evaluate(now=at(40))
    assert state(world["staging"]).load == pytest.approx(0.9)
    assert state(world["staging"]).load_above_since == at(40)


def test_a_pool_without_deployed_nodes_has_no_load_and_never_degrades(world):
    assert degradation.degradation_evaluate(now=at(100)) == []
    assert state(world["prod"]).load is None


def test_a_manual_degradation_is_never_lifted_automatically(world, node):
    degradation.degradation_enable(actor=world["sre"], pool=world["staging"], reason="planned load test")
    assert ramp([0.1] * 200) == []
    assert state(world["staging"]).is_active


def test_leaving_by_hand_restarts_the_entry_clock(world, node):
    ramp([0.95] * 31)
    degradation.degradation_disable(actor=world["sre"], pool=world["staging"], reason="capacity added")
    # Still above the line, but a full enter_after_s must pass again before the system degrades it.
    assert ramp([0.95] * 30, start=31) == []
    assert [e.kind for e in ramp([0.95], start=61)] == ["entered"]


def test_speculative_decoding_off_restarts_nodes_one_at_a_time(world, node, django_capture_on_commit_callbacks):
    engine_nodes.node_create(actor=world["sre"], name="gpu-2", pool=world["staging"])
    EngineNode.objects.filter(name__in=["gpu-1", "gpu-2"]).update(
        is_connected=True, connected_at=T0, last_seen_at=datetime.now(UTC)
    )
    template, _ = template_with_versions(world["sre"])
    document = {"inference_params": {"speculative": {"enabled": True, "method": "ngram"}}}
    v2 = template_version_create(actor=world["sre"], template=template, document=document, base_number=1)
    pool_services.pool_publish(actor=world["sre"], pool=world["staging"], version=v2, reason="spec on")
    degradation.degradation_enable(actor=world["sre"], pool=world["staging"], reason="peak")
    assert policy_bundle(world["staging"])["content"]["degradation"]["speculative_decoding"] is False
    restarts = NodeCommand.objects.filter(op=NodeCommand.Op.RESTART, reason=degradation.RESTART_REASON)
    assert restarts.count() == 2
    assert list(restarts.filter(sent_at__isnull=False).values_list("node__name", flat=True)) == ["gpu-1"]
    degradation.degradation_evaluate()
    assert restarts.filter(sent_at__isnull=False).count() == 1  # gpu-1 has not finished
    restarts.filter(node__name="gpu-1").update(state=NodeCommand.State.SUCCEEDED, finished_at=datetime.now(UTC))
    degradation.degradation_evaluate()
    assert list(
        restarts.filter(sent_at__isnull=False, finished_at__isnull=True).values_list("node__name", flat=True)
    ) == ["gpu-2"]


def test_degradation_restarts_wait_for_a_speculation_rule_restart(world, node):
    """A node restarting for its own speculative-decoding rule holds the pool's turn: no degradation restart of
    another node starts beside it (and no rule restart beside a degradation restart: test_speculation_lease.py)."""
    from controlplane.nodes.services.speculation import speculation_lease_request

    engine_nodes.node_create(actor=world["sre"], name="gpu-2", pool=world["staging"])
    EngineNode.objects.filter(name__in=["gpu-1", "gpu-2"]).update(
        is_connected=True, connected_at=T0, last_seen_at=datetime.now(UTC)
    )
    template, _ = template_with_versions(world["sre"])
    document = {"inference_params": {"speculative": {"enabled": True, "method": "ngram"}}}
    v2 = template_version_create(actor=world["sre"], template=template, document=document, base_number=1)
    pool_services.pool_publish(actor=world["sre"], pool=world["staging"], version=v2, reason="spec on")
    rule, _ = speculation_lease_request(node_id=node.pk, action="off", reason="rejected", state={})
    degradation.degradation_enable(actor=world["sre"], pool=world["staging"], reason="peak")
    restarts = NodeCommand.objects.filter(op=NodeCommand.Op.RESTART, reason=degradation.RESTART_REASON)
    assert restarts.count() == 2 and not restarts.filter(sent_at__isnull=False).exists()
    NodeCommand.objects.filter(pk=rule.pk).update(state=NodeCommand.State.SUCCEEDED, finished_at=datetime.now(UTC))
    degradation.degradation_evaluate()
    assert restarts.filter(sent_at__isnull=False).count() == 1
    late, _ = engine_nodes.node_create(actor=world["sre"], name="gpu-3", pool=world["staging"])
    EngineNode.objects.filter(pk=late.pk).update(is_connected=True, last_seen_at=datetime.now(UTC))
    refused, refusal = speculation_lease_request(node_id=late.pk, action="off", reason="rejected", state={})
    assert refused is None and refusal == "gpu-1 of pool staging is out of service (restart engine)"
