"""Pending alerts say what they wait for: the condition holding since T and firing at T + for, data that stopped
coming, or an evaluator that stopped passing; and a `for` counts only time the condition was seen holding."""

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from controlplane.alerts.evaluation import evaluate, evaluate_claimed
from controlplane.alerts.models import Alert, EvaluatorLease
from controlplane.alerts.selectors import EVALUATOR_RUNNING, alert_summary, evaluator_health
from tests.alerts.conftest import Clock

pytestmark = pytest.mark.django_db


def p99_alert() -> Alert:
    return Alert.objects.filter(rule__name="p99-latency").select_related("rule", "rule_version").order_by("-id").first()


def test_a_pending_alert_says_since_when_the_condition_holds_and_when_it_fires(fleet, clock):
    fleet.add("gpu-1")
    fleet.sample("gpu-1", clock.now, latency_p99_s=1.8)
    evaluate(now=clock.now)
    summary = alert_summary(p99_alert(), evaluator=EVALUATOR_RUNNING, now=clock.now + timedelta(seconds=4))
    holding, fires = clock.now, clock.now + timedelta(seconds=10)
    assert (summary["holding_since"], summary["fires_at"]) == (holding.isoformat(), fires.isoformat())
    assert summary["waiting_for"] == (
        f"condition holding since {holding:%H:%M:%S} UTC; fires at {fires:%H:%M:%S} UTC unless it clears first"
    )


def test_a_pending_alert_without_fresh_data_waits_for_data_and_its_for_starts_again(fleet, clock):
    """A pending alert whose samples stop (the node keeps its heartbeat; its rows were lost, e.g. a locked database
    at ingestion) goes stale at the pass that would have fired it: the last sample is a second older than the
    alert. It then stayed pending for as long as the data stayed away, and the page said nothing about why."""
    fleet.add("gpu-1")
    fleet.sample("gpu-1", clock.now - timedelta(seconds=1), latency_p99_s=1.8)
    evaluate(now=clock.now)
    for _ in range(150):  # five minutes of heartbeats without a sample
        clock.tick(2)
        fleet.heartbeat("gpu-1", at=clock.now)
        evaluate(now=clock.now)
    alert = p99_alert()
    assert (alert.state, alert.is_stale) == ("pending", True)
    summary = alert_summary(alert, evaluator=EVALUATOR_RUNNING, now=clock.now)
    stale_since = alert.stale_since
    assert stale_since is not None and summary["holding_since"] is None and summary["fires_at"] is None
    assert summary["waiting_for"] == (
        f"no fresh data since {stale_since:%H:%M:%S} UTC: the value is unknown, so the 10 s count starts again "
        "once data shows the condition"
    )

    # Data comes back, still above the line: nobody saw it hold for 10 s yet, so it does not fire at once.
    clock.tick(2)
    back = clock.now
    fleet.sample("gpu-1", clock.now, latency_p99_s=1.9)
    evaluate(now=clock.now)
    alert = p99_alert()
    assert (alert.state, alert.is_stale, alert.stale_since, alert.warn_since) == ("pending", False, None, back)
    for _ in range(4):
        clock.tick(2)
        fleet.sample("gpu-1", clock.now, latency_p99_s=1.9)
        evaluate(now=clock.now)
    assert p99_alert().state == "pending"
    clock.tick(2)
    fleet.sample("gpu-1", clock.now, latency_p99_s=1.9)
    evaluate(now=clock.now)
    alert = p99_alert()
    assert alert.state == "firing" and alert.fired_at - back == timedelta(seconds=10)


def test_a_stopped_evaluator_is_what_every_pending_alert_waits_for(fleet):
    clock = Clock(timezone.now().replace(microsecond=0))
    fleet.add("gpu-1")
    fleet.sample("gpu-1", clock.now, latency_p99_s=1.8)
    assert evaluate_claimed(now=clock.now).claimed
    assert evaluator_health().is_running
    last = timezone.now() - timedelta(minutes=5)
    EvaluatorLease.objects.filter(pk=1).update(last_succeeded_at=last)
    health = evaluator_health()
    assert not health.is_running
    assert re.fullmatch(
        r"alert evaluation last completed a pass at \d\d:\d\d:\d\d UTC \(5 min( \d+ s)? ago\): nothing fires until "
        r"it runs",
        health.text,
    ), health.text
    assert alert_summary(p99_alert())["waiting_for"] == health.text

    client = Client()
    client.force_login(fleet.sre)
    page = client.get(reverse("dashboard:oncall")).content.decode()
    assert health.text in page  # the banner and the pending row
    assert re.search(r'data-testid="evaluator-state"\s*>', page)  # shown, not hidden


def test_a_failing_pass_does_not_count_as_evaluation_running(fleet, clock, monkeypatch):
    def broken(self):
        raise RuntimeError("database is locked")

    monkeypatch.setattr("controlplane.alerts.evaluation._Pass.run", broken)
    with pytest.raises(RuntimeError):
        evaluate_claimed(now=clock.now)
    lease = EvaluatorLease.objects.get(pk=1)
    assert lease.last_finished_at is not None and lease.last_succeeded_at is None
    assert evaluator_health().text == "alert evaluation has not completed a pass yet: nothing fires until then"
