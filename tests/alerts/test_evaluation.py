"""The evaluation pass with a fake clock: pending → firing after `for`, escalation, resolution, unknown data."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from controlplane.alerts.evaluation import evaluate, evaluate_claimed
from controlplane.alerts.models import Alert, AlertEvent, AlertGroup, AlertRule, EvaluatorLease
from controlplane.alerts.services.rules import alert_rule_version_create
from controlplane.nodes.models import EngineNode

pytestmark = pytest.mark.django_db


def alert_of(rule: str, name: str) -> Alert | None:
    return Alert.objects.filter(rule__name=rule, name=name).order_by("-id").first()


def kinds(alert: Alert) -> list[tuple[str, str]]:
    return list(alert.events.values_list("kind", "severity"))


def step(fleet, clock, node: str, seconds: float = 2, **values):
    """Move the clock, let `node` send a sample with `values`, run one pass."""
    clock.tick(seconds)
    fleet.sample(node, clock.now, **values)
    return evaluate(now=clock.now)


def test_p99_goes_pending_then_fires_after_for_then_escalates_deescalates_and_resolves(fleet, clock):
    fleet.add("gpu-1")
    fleet.sample("gpu-1", clock.now, latency_p99_s=1.8)
    evaluate(now=clock.now)
    alert = alert_of("p99-latency", "gpu-1")
    assert (alert.state, alert.severity, alert.pool) == ("pending", "warning", "prod-main")
    started = clock.now

    for _ in range(4):  # 8 s: still short of the rule's 10 s
        step(fleet, clock, "gpu-1", latency_p99_s=1.9)
        alert.refresh_from_db()
        assert alert.state == "pending"
    step(fleet, clock, "gpu-1", latency_p99_s=1.9)  # 10 s
    alert.refresh_from_db()
    assert (alert.state, alert.severity) == ("firing", "warning")
    assert alert.fired_at - started == timedelta(seconds=10)
    assert alert.group is not None and alert.group.key == "p99-latency:prod-main"

    # Above 2.0 s: critical only once that has held for 10 s too.
    step(fleet, clock, "gpu-1", latency_p99_s=2.4)
    alert.refresh_from_db()
    assert alert.severity == "warning"
    for _ in range(5):
        step(fleet, clock, "gpu-1", latency_p99_s=2.4)
    alert.refresh_from_db()
    assert (alert.state, alert.severity) == ("firing", "critical")
    assert AlertGroup.objects.get(pk=alert.group_id).severity == "critical"

    step(fleet, clock, "gpu-1", latency_p99_s=1.7)  # back under critical, still over warning
    alert.refresh_from_db()
    assert (alert.state, alert.severity) == ("firing", "warning")

    step(fleet, clock, "gpu-1", latency_p99_s=0.9)
    alert.refresh_from_db()
    assert alert.state == "resolved" and alert.resolved_at == clock.now
    assert kinds(alert) == [
        ("pending", "warning"),
        ("firing", "warning"),
        ("escalated", "critical"),
        ("de-escalated", "warning"),
        ("resolved", "warning"),
    ]
    group = AlertGroup.objects.get(pk=alert.group_id)
    assert group.state == "resolved"
    assert list(group.events.values_list("kind", flat=True)) == ["firing", "escalated", "de-escalated", "resolved"]


def test_a_condition_that_breaks_before_for_never_fires(fleet, clock):
    fleet.add("gpu-1")
    fleet.sample("gpu-1", clock.now, latency_p99_s=1.8)
    evaluate(now=clock.now)
    step(fleet, clock, "gpu-1", latency_p99_s=1.8)
    step(fleet, clock, "gpu-1", latency_p99_s=0.5)  # a blip: the 10 s never completed
    for _ in range(5):
        step(fleet, clock, "gpu-1", latency_p99_s=1.8)
    alerts = Alert.objects.filter(rule__name="p99-latency")
    assert [a.state for a in alerts.order_by("id")] == ["resolved", "pending"]
    assert alerts.get(state="resolved").fired_at is None
    assert not AlertGroup.objects.exists()


def test_missing_samples_are_unknown_not_ok(fleet, clock):
    fleet.add("gpu-1")
    fleet.sample("gpu-1", clock.now, latency_p99_s=2.5)
    evaluate(now=clock.now)
    for _ in range(5):
        step(fleet, clock, "gpu-1", latency_p99_s=2.5)
    alert = alert_of("p99-latency", "gpu-1")
    assert (alert.state, alert.severity, alert.is_stale) == ("firing", "critical", False)

    # The node keeps its heartbeat but stops sending samples: after 10 s its figures are unknown.
    for _ in range(8):
        clock.tick(2)
        fleet.heartbeat("gpu-1", at=clock.now)
        evaluate(now=clock.now)
    alert.refresh_from_db()
    assert (alert.state, alert.severity, alert.is_stale) == ("firing", "critical", True)
    # ... which is itself an alert: metrics stale.
    assert alert_of("metrics-stale", "gpu-1").state == "firing"

    step(fleet, clock, "gpu-1", latency_p99_s=0.4)
    alert.refresh_from_db()
    assert (alert.state, alert.is_stale) == ("resolved", False)
    assert alert_of("metrics-stale", "gpu-1").state == "resolved"


def test_a_null_figure_in_a_fresh_sample_means_nothing_to_measure(fleet, clock):
    fleet.add("gpu-1")
    fleet.sample("gpu-1", clock.now, latency_p99_s=2.5)
    evaluate(now=clock.now)
    for _ in range(5):
        step(fleet, clock, "gpu-1", latency_p99_s=2.5)
    assert alert_of("p99-latency", "gpu-1").state == "firing"
    step(fleet, clock, "gpu-1", latency_p99_s=None)  # traffic stopped: no latency in the window
    assert alert_of("p99-latency", "gpu-1").state == "resolved"


def test_node_lost_fires_at_once_and_resolves_on_reconnect(fleet, clock):
    fleet.add("gpu-1")
    fleet.add("gpu-2")
    fleet.sample("gpu-1", clock.now)
    fleet.sample("gpu-2", clock.now)
    evaluate(now=clock.now)
    assert not Alert.objects.filter(rule__name="node-lost").exists()

    fleet.disconnect("gpu-2")
    step(fleet, clock, "gpu-1")
    alert = alert_of("node-lost", "gpu-2")
    assert (alert.state, alert.severity) == ("firing", "critical")
    # A lost node is not also "metrics stale": one page, not two.
    assert not Alert.objects.filter(rule__name="metrics-stale").exclude(state="resolved").exists()

    fleet.connect("gpu-2", at=clock.tick(2))
    fleet.sample("gpu-2", clock.now)
    evaluate(now=clock.now)
    alert.refresh_from_db()
    assert alert.state == "resolved"


def test_silence_of_heartbeats_longer_than_node_lost_after_counts_as_lost(fleet, clock, settings):
    settings.NODE_LOST_AFTER_S = 10
    fleet.add("gpu-1")
    fleet.sample("gpu-1", clock.now)
    clock.tick(10)
    evaluate(now=clock.now)
    assert not Alert.objects.filter(rule__name="node-lost").exists()
    clock.tick(2)
    evaluate(now=clock.now)
    assert alert_of("node-lost", "gpu-1").state == "firing"


def test_nodes_never_connected_or_revoked_are_not_lost(fleet, clock, users):
    from controlplane.nodes.services.engine_nodes import node_create, node_token_revoke

    node_create(actor=users["sre"], name="never-started", pool=fleet.prod)
    gone = fleet.add("retired")
    EngineNode.objects.filter(pk=gone.pk).update(is_connected=False)
    node_token_revoke(actor=users["sre"], node=EngineNode.objects.get(pk=gone.pk), reason="host retired")
    evaluate(now=clock.now)
    assert not Alert.objects.filter(rule__name="node-lost").exists()


def test_rollout_nacked_fires_while_the_node_refuses_the_desired_version(fleet, clock, users):
    from controlplane.nodes.services.pools import pool_publish
    from tests.factories import template_with_versions

    _, (v1,) = template_with_versions(users["agent"], name="chat")
    pool_publish(actor=users["sre"], pool=fleet.staging, version=v1, reason="first")
    fleet.add("gpu-s", pool=fleet.staging)
    fleet.sample("gpu-s", clock.now)
    EngineNode.objects.filter(name="gpu-s").update(last_nack_hash=v1.content_hash, last_nack_error="bad flag")
    evaluate(now=clock.now)
    assert (alert_of("rollout-nacked", "gpu-s").state, alert_of("rollout-nacked", "gpu-s").severity) == (
        "firing",
        "warning",
    )
    EngineNode.objects.filter(name="gpu-s").update(applied_hash=v1.content_hash)
    step(fleet, clock, "gpu-s")
    assert alert_of("rollout-nacked", "gpu-s").state == "resolved"


def test_canary_rolled_back_fires_for_the_pool_and_holds_ten_minutes(fleet, clock, users):
    from controlplane.nodes.models import Pool, Rollout
    from controlplane.nodes.services import rollouts
    from controlplane.nodes.services.pools import pool_publish
    from tests.factories import template_with_versions

    sre = users["sre"]
    _, (v1, v2, v3) = template_with_versions(users["agent"], name="chat", temperatures=(0.3, 0.2, 0.1))
    Pool.objects.filter(pk=fleet.staging.pk).update(canary_stages=[{"nodes": 1}, {"percent": 100}])
    pool_publish(actor=sre, pool=fleet.staging, version=v1, reason="first")
    for name in ("gpu-s1", "gpu-s2"):
        fleet.add(name, pool=fleet.staging)
    EngineNode.objects.update(applied_hash=v1.content_hash, applied_version=v1)
    # An SRE's abort is a decision, not a failed canary: no alert.
    pool_publish(actor=sre, pool=Pool.objects.get(pk=fleet.staging.pk), version=v2, reason="cooler")
    rollouts.rollout_abort(actor=sre, rollout=Rollout.objects.get(to_version=v2), reason="wrong version")
    evaluate(now=clock.now)
    assert alert_of("canary-rolled-back", "staging") is None
    pool_publish(actor=sre, pool=Pool.objects.get(pk=fleet.staging.pk), version=v3, reason="cooler still")
    rollout = Rollout.objects.get(to_version=v3)
    rollouts._fail(rollout, {"stage": 0, "verdict": "fail", "reasons": ["canary P99 2.5 s is above 2.0 s"]})
    Rollout.objects.filter(pk=rollout.pk).update(finished_at=clock.now)
    evaluate(now=clock.now)
    alert = alert_of("canary-rolled-back", "staging")
    assert (alert.scope, alert.pool, alert.state, alert.severity) == ("pool", "staging", "firing", "warning")
    assert alert_of("canary-rolled-back", "prod-main") is None
    clock.tick(590)
    evaluate(now=clock.now)
    assert alert_of("canary-rolled-back", "staging").state == "firing"
    clock.tick(20)
    evaluate(now=clock.now)
    assert alert_of("canary-rolled-back", "staging").state == "resolved"


def test_engine_restarts_count_within_ten_minutes(fleet, clock):
    fleet.add("gpu-1")
    fleet.sample("gpu-1", clock.now, engine_restarts=5)  # history before the evaluator saw it: the baseline
    evaluate(now=clock.now)
    for restarts in (6, 7):
        step(fleet, clock, "gpu-1", seconds=60, engine_restarts=restarts)
    assert alert_of("engine-restarting", "gpu-1") is None
    step(fleet, clock, "gpu-1", seconds=60, engine_restarts=8)  # 3 within 10 minutes
    assert (alert_of("engine-restarting", "gpu-1").state, alert_of("engine-restarting", "gpu-1").severity) == (
        "firing",
        "warning",
    )
    # The agent restarted (its counter reset); the engine restarts 3 more times: 6 within the window.
    step(fleet, clock, "gpu-1", seconds=30, engine_restarts=3)
    assert alert_of("engine-restarting", "gpu-1").severity == "critical"
    # Ten quiet minutes later the window holds nothing.
    for _ in range(11):
        step(fleet, clock, "gpu-1", seconds=60, engine_restarts=3)
    assert alert_of("engine-restarting", "gpu-1").state == "resolved"


def test_pool_scope_rule_reads_the_pool_aggregate(fleet, clock):
    fleet.add("gpu-1")
    fleet.sample("gpu-1", clock.now)
    fleet.aggregate("pool", "prod-main", clock.now, long_request_share=0.08)
    evaluate(now=clock.now)
    alert = alert_of("long-requests", "prod-main")
    assert (alert.scope, alert.pool, alert.state) == ("pool", "prod-main", "pending")
    for _ in range(30):
        clock.tick(2)
        fleet.sample("gpu-1", clock.now)
        fleet.aggregate("pool", "prod-main", clock.now, long_request_share=0.08)
        evaluate(now=clock.now)
    alert.refresh_from_db()
    assert (alert.state, alert.severity, alert.group.key) == ("firing", "warning", "long-requests:prod-main")


def test_a_disabled_rule_resolves_its_alerts(fleet, clock, users):
    fleet.add("gpu-1")
    fleet.sample("gpu-1", clock.now, fragmentation_ratio=0.5)
    evaluate(now=clock.now)
    assert alert_of("memory-fragmentation", "gpu-1").state == "pending"
    rule = AlertRule.objects.get(name="memory-fragmentation")
    current = rule.versions.get(number=rule.latest_number)
    fields = {**current.fields(), "is_enabled": False}
    alert_rule_version_create(actor=users["sre"], rule=rule, base_number=1, comment="noisy on the simulator", **fields)
    step(fleet, clock, "gpu-1", fragmentation_ratio=0.5)
    assert alert_of("memory-fragmentation", "gpu-1").state == "resolved"


def test_a_raised_threshold_applies_to_open_alerts_from_the_next_pass(fleet, clock, users):
    fleet.add("gpu-1")
    fleet.sample("gpu-1", clock.now, batch_idle_ratio=0.2)
    evaluate(now=clock.now)
    rule = AlertRule.objects.get(name="batch-idle")
    current = rule.versions.get(number=1)
    fields = {**current.fields(), "warn": 0.3, "critical": 0.5}
    alert_rule_version_create(actor=users["sre"], rule=rule, base_number=1, comment="quiet hours", **fields)
    step(fleet, clock, "gpu-1", batch_idle_ratio=0.2)
    assert alert_of("batch-idle", "gpu-1").state == "resolved"


def test_one_pass_costs_the_same_queries_for_5_or_50_nodes(fleet, clock):
    def pass_queries(count: int, prefix: str) -> int:
        for i in range(count):
            fleet.add(f"{prefix}-{i}")
            fleet.sample(f"{prefix}-{i}", clock.now, latency_p99_s=1.8 if i % 2 else 0.4, batch_idle_ratio=0.3)
        evaluate(now=clock.now)  # creates the alerts
        clock.tick(2)
        for i in range(count):
            fleet.sample(f"{prefix}-{i}", clock.now, latency_p99_s=1.8 if i % 2 else 0.4, batch_idle_ratio=0.3)
        with CaptureQueriesContext(connection) as queries:
            report = evaluate(now=clock.now)
        assert report.queries == len(queries)
        return len(queries)

    small = pass_queries(5, "a")
    EngineNode.objects.all().delete()
    Alert.objects.all().delete()
    large = pass_queries(50, "b")
    assert large == small, (small, large)
    assert small <= 25


def test_only_one_of_two_concurrent_claims_runs_a_pass(fleet, clock):
    first = evaluate_claimed(now=clock.now)
    second = evaluate_claimed(now=clock.now)  # the same beat tick delivered twice
    assert first.claimed and not second.claimed
    lease = EvaluatorLease.objects.get(pk=1)
    assert lease.lease_until is None and lease.last_queries == first.queries
    assert evaluate_claimed(now=clock.tick(2)).claimed


def test_a_crashed_pass_frees_its_lease_after_the_timeout(fleet, clock):
    EvaluatorLease.objects.create(pk=1, lease_until=clock.now + timedelta(seconds=30), last_started_at=clock.now)
    assert not evaluate_claimed(now=clock.tick(10)).claimed
    assert evaluate_claimed(now=clock.tick(25)).claimed


def test_every_event_names_its_alert_or_incident(fleet, clock):
    fleet.add("gpu-1")
    fleet.disconnect("gpu-1")
    evaluate(now=clock.now)
    assert AlertEvent.objects.filter(alert__isnull=True, group__isnull=True).count() == 0
    assert AlertEvent.objects.filter(alert__name="gpu-1", kind="firing").exists()
