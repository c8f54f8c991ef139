"""Canary rollouts: stages, hello reconciliation during a canary, the analysis on stored samples, SRE actions."""

from datetime import timedelta

import pytest
from django.utils import timezone

from controlplane.audit.models import AuditEntry
from controlplane.lib.errors import Conflict, InvalidField
from controlplane.metrics.models import MetricSample
from controlplane.metrics.samples import sample_window_s
from controlplane.nodes import waiting
from controlplane.nodes.models import EngineNode, Pool, Rollout
from controlplane.nodes.selectors import node_desired_version
from controlplane.nodes.services import agent_sessions, canary_settings, rollouts
from controlplane.nodes.services.engine_nodes import node_create
from controlplane.nodes.services.pools import pool_publish, pool_rollback
from tests.factories import pools, template_with_versions

pytestmark = pytest.mark.django_db

WINDOW_S = 10
SAMPLE_WINDOW = 10  # the default METRICS_SAMPLE_WINDOW_S, which these tests run with
# The analysis runs once the canary's samples have turned over to the new version and a window has passed.
READY_S = SAMPLE_WINDOW + WINDOW_S


@pytest.fixture
def canary(sre):
    """staging with gpu-1..gpu-4 on v1, stages [1 node, 50 %, 100 %], then v2 published: gpu-1 is the canary."""
    staging, _ = pools(sre)
    Pool.objects.filter(pk=staging.pk).update(
        canary_stages=[{"nodes": 1}, {"percent": 50}, {"percent": 100}], analysis_window_s=WINDOW_S
    )
    _, (v1, v2) = template_with_versions(sre, temperatures=(0.3, 0.2))
    pool_publish(actor=sre, pool=staging, version=v1, reason="first")
    nodes = [node_create(actor=sre, name=f"gpu-{i}", pool=staging)[0] for i in range(1, 5)]
    EngineNode.objects.update(is_connected=True, applied_hash=v1.content_hash, applied_version=v1)
    pool_publish(actor=sre, pool=Pool.objects.get(pk=staging.pk), version=v2, reason="cooler strict tier")
    return {"pool": staging, "v1": v1, "v2": v2, "nodes": nodes, "rollout": Rollout.objects.get(pool=staging)}


def ack(name, version):
    node = EngineNode.objects.get(name=name)
    agent_sessions.node_config_result(node_id=node.pk, ok=True, content_hash=version.content_hash, version=None)


def samples(name, *, start, seconds, p99, error_rate=0.0, acceptance=None):
    MetricSample.objects.bulk_create(
        MetricSample(
            scope="node",
            name=name,
            pool="staging",
            t=start + timedelta(seconds=s),
            resolution_s=1,
            values={"latency_p99_s": p99, "error_rate": error_rate, "spec_acceptance_rate": acceptance},
        )
        for s in range(seconds)
    )


def step(rollout, now):
    rollouts.rollout_step(rollout_id=rollout.pk, now=now)
    rollout.refresh_from_db()
    return rollout


def acked_window(canary):
    """gpu-1 ACKs; the stage's window starts at t0."""
    rollout = canary["rollout"]
    ack("gpu-1", canary["v2"])
    t0 = timezone.now()
    step(rollout, t0)
    assert rollout.stage_acked_at == t0
    return rollout, t0


def test_publish_reaches_only_the_first_stage_and_a_reconnect_keeps_the_rest_on_v1(canary):
    rollout, v1, v2 = canary["rollout"], canary["v1"], canary["v2"]
    assert rollout.stage_nodes == [["gpu-1"]] and rollout.from_version == v1 and rollout.to_version == v2
    assert Pool.objects.get(pk=canary["pool"].pk).desired_version == v2  # where the pool is heading
    gpu1, gpu2 = EngineNode.objects.get(name="gpu-1"), EngineNode.objects.get(name="gpu-2")
    assert node_desired_version(node=gpu1) == v2 and node_desired_version(node=gpu2) == v1
    on_v1 = {"applied_hash": v1.content_hash, "applied_version": {"template": "chat", "number": 1}}
    assert agent_sessions.node_hello(node_id=gpu2.pk, session_id="s2", hello=on_v1) is None
    assert agent_sessions.node_hello(node_id=gpu1.pk, session_id="s1", hello=on_v1)["hash"] == v2.content_hash


def test_a_second_publish_during_a_rollout_is_refused(canary, sre):
    with pytest.raises(Conflict):
        pool_publish(actor=sre, pool=canary["pool"], version=canary["v1"], reason="again")


def test_window_passes_and_promotes_then_succeeds_when_every_node_acked(canary, sre):
    rollout, t0 = acked_window(canary)
    start = t0 - timedelta(seconds=1)
    samples("gpu-1", start=start, seconds=READY_S + 2, p99=0.9)
    for name in ("gpu-2", "gpu-3", "gpu-4"):
        samples(name, start=start, seconds=READY_S + 2, p99=0.8)
    assert step(rollout, t0 + timedelta(seconds=READY_S - 1)).stage_index == 0  # still in its window
    rollout = step(rollout, t0 + timedelta(seconds=READY_S))
    assert rollout.stage_index == 1 and rollout.stage_nodes == [["gpu-1"], ["gpu-2"]]
    [evidence] = rollout.evidence
    assert evidence["verdict"] == "pass" and evidence["canary"]["latency_p99_s"] == pytest.approx(0.9)
    assert evidence["baseline"]["latency_p99_s"] == pytest.approx(0.8)
    assert evidence["thresholds"]["p99_warn_s"] == 1.6
    ack("gpu-2", canary["v2"])
    rollouts.rollout_promote(actor=sre, rollout=rollout, reason="looks good")
    rollout.refresh_from_db()
    assert rollout.stage_index == 2 and set(rollout.canary_nodes) == {"gpu-1", "gpu-2", "gpu-3", "gpu-4"}
    for name in ("gpu-3", "gpu-4"):
        ack(name, canary["v2"])
    rollout = step(rollout, t0 + timedelta(seconds=READY_S + 1))
    rollout = step(rollout, t0 + timedelta(seconds=READY_S + 2))
    assert rollout.state == Rollout.State.SUCCEEDED


def test_slow_canary_fails_and_is_rolled_back_by_the_system_with_the_evidence(canary):
    rollout, t0 = acked_window(canary)
    start = t0 - timedelta(seconds=1)
    samples("gpu-1", start=start, seconds=READY_S + 2, p99=1.8)  # above warn 1.6 and > 1.5 × 0.8
    for name in ("gpu-2", "gpu-3", "gpu-4"):
        samples(name, start=start, seconds=READY_S + 2, p99=0.8)
    rollout = step(rollout, t0 + timedelta(seconds=READY_S))
    assert rollout.state == Rollout.State.ROLLED_BACK
    assert rollout.evidence[-1]["verdict"] == "fail" and "P99" in rollout.evidence[-1]["reasons"][0]
    pool = Pool.objects.get(pk=canary["pool"].pk)
    assert pool.desired_version == canary["v1"]
    assert node_desired_version(node=EngineNode.objects.get(name="gpu-1")) == canary["v1"]
    entry = AuditEntry.objects.filter(action="pool.rollback").latest("id")
    assert entry.actor_name == "system" and entry.after["evidence"]["verdict"] == "fail"
    assert entry.reason.startswith("canary analysis failed: canary P99")
    release = pool.releases.first()
    assert release.actor is None and release.actor_name == "system"


def test_the_stage_waits_for_the_configured_sample_window_to_turn_over(canary, settings):
    settings.METRICS_SAMPLE_WINDOW_S = 3
    rollout, t0 = acked_window(canary)
    assert sample_window_s() == 3
    assert waiting.window_left_s(rollout, t0) == pytest.approx(3 + WINDOW_S)


def test_the_canary_is_judged_on_samples_of_the_new_version_alone(canary):
    """A canary's first samples after its ACK still carry the old version's fast requests in their 10 s window: a
    window mean taken over them reads a slow version as fast. The analysis waits for the samples to turn over."""
    rollout, t0 = acked_window(canary)
    start = t0 - timedelta(seconds=1)
    # Mixed samples while the node's sample window still holds old-version requests, then the new version's own.
    samples("gpu-1", start=start, seconds=SAMPLE_WINDOW + 1, p99=0.15)
    samples("gpu-1", start=t0 + timedelta(seconds=SAMPLE_WINDOW), seconds=WINDOW_S + 2, p99=3.8)
    for name in ("gpu-2", "gpu-3", "gpu-4"):
        samples(name, start=start, seconds=READY_S + 2, p99=0.15)
    # Where a window right after the ACK would have averaged the mixed samples and passed, nothing is decided yet.
    assert step(rollout, t0 + timedelta(seconds=WINDOW_S)).evidence == []
    assert waiting.window_left_s(rollout, t0 + timedelta(seconds=WINDOW_S)) == pytest.approx(SAMPLE_WINDOW)
    rollout = step(rollout, t0 + timedelta(seconds=READY_S))
    assert rollout.state == Rollout.State.ROLLED_BACK
    assert rollout.evidence[-1]["canary"]["latency_p99_s"] == pytest.approx(3.8)


def test_slow_baseline_alone_does_not_fail_a_canary_below_the_ratio(canary):
    rollout, t0 = acked_window(canary)
    start = t0 - timedelta(seconds=1)
    samples("gpu-1", start=start, seconds=READY_S + 2, p99=1.7)  # above warn but like the baseline
    for name in ("gpu-2", "gpu-3", "gpu-4"):
        samples(name, start=start, seconds=READY_S + 2, p99=1.5)
    assert step(rollout, t0 + timedelta(seconds=READY_S)).evidence[-1]["verdict"] == "pass"


def test_errors_and_acceptance_drop_fail(canary):
    rollout, t0 = acked_window(canary)
    start = t0 - timedelta(seconds=1)
    samples("gpu-1", start=start, seconds=READY_S + 2, p99=0.5, error_rate=0.03, acceptance=0.4)
    for name in ("gpu-2", "gpu-3", "gpu-4"):
        samples(name, start=start, seconds=READY_S + 2, p99=0.5, error_rate=0.005, acceptance=0.7)
    rollout = step(rollout, t0 + timedelta(seconds=READY_S))
    reasons = rollout.evidence[-1]["reasons"]
    assert rollout.state == Rollout.State.ROLLED_BACK and len(reasons) == 2
    assert "error rate" in reasons[0] and "acceptance" in reasons[1]


def test_missing_canary_metrics_hold_then_fail_after_two_windows(canary):
    rollout, t0 = acked_window(canary)
    samples("gpu-2", start=t0, seconds=SAMPLE_WINDOW + 3 * WINDOW_S, p99=0.5)
    rollout = step(rollout, t0 + timedelta(seconds=READY_S))
    assert rollout.state == Rollout.State.RUNNING and rollout.evidence[-1]["verdict"] == "hold"
    rollout = step(rollout, t0 + timedelta(seconds=READY_S + 2))
    assert len(rollout.evidence) == 1  # one hold kept per stage, not one per pass
    rollout = step(rollout, t0 + timedelta(seconds=SAMPLE_WINDOW + 2 * WINDOW_S))
    assert rollout.state == Rollout.State.ROLLED_BACK
    assert "no canary metrics" in rollout.evidence[-1]["reasons"][-1]


def unfinished_samples(name, *, start, seconds):
    """A node that reports every second with requests in flight, none of which finished within its sample window."""
    values = {"latency_p99_s": None, "error_rate": None, "rejected_rate": None, "requests_running": 4}
    MetricSample.objects.bulk_create(
        MetricSample(scope="node", name=name, pool="staging", t=start + timedelta(seconds=s), resolution_s=1,
                     values=values)
        for s in range(seconds)
    )  # fmt: skip


def test_a_canary_slower_than_its_sample_window_fails_as_slow_not_as_silent(canary):
    """Requests that take longer than the 10 s sample window leave every sample without a P99: that canary is above
    the 2 s critical line, not missing."""
    rollout, t0 = acked_window(canary)
    start = t0 - timedelta(seconds=1)
    unfinished_samples("gpu-1", start=start, seconds=READY_S + 2)
    for name in ("gpu-2", "gpu-3", "gpu-4"):
        samples(name, start=start, seconds=READY_S + 2, p99=0.5)
    rollout = step(rollout, t0 + timedelta(seconds=READY_S))
    assert rollout.state == Rollout.State.ROLLED_BACK
    failed = rollout.evidence[-1]
    assert failed["verdict"] == "fail" and failed["slow_nodes"] == ["gpu-1"]
    assert failed["reasons"] == [
        "canary P99 is above the critical line 2.0 s: gpu-1 finished no request within its 10 s sample windows "
        "while requests were in flight"
    ]


def test_a_canary_slower_than_a_short_sample_window_holds_as_slow_then_fails(canary, settings):
    """A sample window shorter than the critical line proves only that the canary is slower than that window."""
    settings.METRICS_SAMPLE_WINDOW_S = 1
    rollout, t0 = acked_window(canary)
    unfinished_samples("gpu-1", start=t0, seconds=1 + 3 * WINDOW_S)
    for name in ("gpu-2", "gpu-3", "gpu-4"):
        samples(name, start=t0, seconds=1 + 3 * WINDOW_S, p99=0.5)
    rollout = step(rollout, t0 + timedelta(seconds=1 + WINDOW_S))
    held = rollout.evidence[-1]
    assert rollout.state == Rollout.State.RUNNING and held["verdict"] == "hold"
    assert held["reasons"] == ["gpu-1 finished no request within its 1 s sample windows while requests were in "
                               "flight: slower than 1 s"]  # fmt: skip
    rollout = step(rollout, t0 + timedelta(seconds=1 + 2 * WINDOW_S))
    assert rollout.state == Rollout.State.ROLLED_BACK
    assert (
        rollout.evidence[-1]["reasons"][-1]
        == "no canary request finished within a sample window for 2 analysis windows"
    )


def test_a_nack_from_the_canary_fails_the_stage_at_once(canary):
    rollout = canary["rollout"]
    gpu1 = EngineNode.objects.get(name="gpu-1")
    agent_sessions.node_config_result(
        node_id=gpu1.pk, ok=False, content_hash=canary["v2"].content_hash, version=None, error="bad flag"
    )
    rollout = step(rollout, timezone.now())
    assert rollout.state == Rollout.State.ROLLED_BACK and "refused" in rollout.evidence[-1]["reasons"][0]


def test_a_stage_whose_nodes_never_ack_fails_after_the_apply_timeout(canary, settings):
    """A lost push or an engine that never comes back must not hold the pool's rollout (and its publishes) for ever."""
    settings.ROLLOUT_APPLY_TIMEOUT_S = 300
    rollout = canary["rollout"]
    started = rollout.stage_started_at
    assert step(rollout, started + timedelta(seconds=299)).state == Rollout.State.RUNNING
    rollout = step(rollout, started + timedelta(seconds=300))
    assert rollout.state == Rollout.State.ROLLED_BACK
    [reason] = rollout.evidence[-1]["reasons"]
    assert reason == f"not applied within 300 s: gpu-1 (connected, on {canary['v1'].content_hash[:12]})"
    assert Pool.objects.get(pk=canary["pool"].pk).desired_version == canary["v1"]
    entry = AuditEntry.objects.filter(action="pool.rollback").latest("id")
    assert entry.actor_name == "system" and "not applied within 300 s" in entry.reason


def test_pause_holds_resume_restarts_the_window_abort_rolls_back(canary, sre):
    rollout, t0 = acked_window(canary)
    rollouts.rollout_pause(actor=sre, rollout=rollout, reason="watching a dashboard")
    rollouts.rollouts_analyse(now=t0 + timedelta(seconds=READY_S))
    rollout.refresh_from_db()
    assert rollout.state == Rollout.State.PAUSED and rollout.evidence == []
    with pytest.raises(Conflict):
        rollouts.rollout_pause(actor=sre, rollout=rollout, reason="again")
    rollouts.rollout_resume(actor=sre, rollout=rollout, reason="fine")
    rollout.refresh_from_db()
    assert rollout.state == Rollout.State.RUNNING and rollout.stage_acked_at is None
    with pytest.raises(InvalidField):
        rollouts.rollout_abort(actor=sre, rollout=rollout, reason="  ")
    rollouts.rollout_abort(actor=sre, rollout=rollout, reason="wrong template")
    rollout.refresh_from_db()
    assert rollout.state == Rollout.State.ABORTED
    assert Pool.objects.get(pk=canary["pool"].pk).desired_version == canary["v1"]
    actions = list(
        AuditEntry.objects.filter(target_type="nodes.rollout").order_by("id").values_list("action", flat=True)
    )
    assert actions == ["rollout.pause", "rollout.resume", "rollout.abort"]


def test_rollback_ends_the_rollout(canary, sre):
    pool_rollback(actor=sre, pool=canary["pool"], reason="not today")
    rollout = Rollout.objects.get(pk=canary["rollout"].pk)
    assert rollout.state == Rollout.State.ABORTED and "not today" in rollout.outcome


def test_stages_take_connected_nodes_first_then_by_name(sre):
    """A disconnected node cannot ACK or report, so a stage takes connected nodes first; within each, by name."""
    staging, _ = pools(sre)
    Pool.objects.filter(pk=staging.pk).update(canary_stages=[{"nodes": 1}, {"nodes": 3}, {"percent": 100}])
    _, (v1, v2) = template_with_versions(sre, temperatures=(0.3, 0.2))
    pool_publish(actor=sre, pool=staging, version=v1, reason="first")
    for name in ("gpu-e", "gpu-a", "gpu-d", "gpu-b", "gpu-c"):
        node_create(actor=sre, name=name, pool=staging)
    EngineNode.objects.update(applied_hash=v1.content_hash, applied_version=v1)
    EngineNode.objects.filter(name__in=["gpu-c", "gpu-e"]).update(is_connected=True)
    pool_publish(actor=sre, pool=Pool.objects.get(pk=staging.pk), version=v2, reason="cooler")
    rollout = Rollout.objects.get(pool=staging)
    assert rollout.stage_nodes == [["gpu-c"]]
    rollouts.rollout_promote(actor=sre, rollout=rollout, reason="next")
    rollout.refresh_from_db()
    assert rollout.stage_nodes == [["gpu-c"], ["gpu-e", "gpu-a"]]  # the other connected one, then the first by name
    rollouts.rollout_promote(actor=sre, rollout=rollout, reason="all")
    rollout.refresh_from_db()
    assert rollout.stage_nodes[-1] == ["gpu-b", "gpu-d"]


def test_single_node_pool_and_disabled_canary_publish_to_everyone(sre):
    staging, _ = pools(sre)
    _, (v1, v2, v3) = template_with_versions(sre, temperatures=(0.3, 0.2, 0.1))
    pool_publish(actor=sre, pool=staging, version=v1, reason="first")
    node_create(actor=sre, name="gpu-1", pool=staging)
    pool_publish(actor=sre, pool=Pool.objects.get(pk=staging.pk), version=v2, reason="one node")
    node_create(actor=sre, name="gpu-2", pool=staging)
    canary_settings.pool_canary_update(
        actor=sre, pool=staging, canary_stages=[{"percent": 100}], analysis_window_s=60, reason="no canary here"
    )
    pool_publish(actor=sre, pool=Pool.objects.get(pk=staging.pk), version=v3, reason="two nodes, no canary")
    assert not Rollout.objects.exists()


@pytest.mark.parametrize(
    "stages",
    [[], [{"nodes": 1}], [{"percent": 50}, {"percent": 25}, {"percent": 100}], [{"nodes": 0}, {"percent": 100}],
     [{"share": 1}, {"percent": 100}], [{"percent": 100.5}]],
)  # fmt: skip
def test_bad_stages_are_refused(sre, stages):
    staging, _ = pools(sre)
    with pytest.raises(InvalidField):
        canary_settings.pool_canary_update(
            actor=sre, pool=staging, canary_stages=stages, analysis_window_s=60, reason="x"
        )
