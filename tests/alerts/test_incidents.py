"""Incidents: grouping, silences (matching, expiry), acknowledgement, and the notifications they decide."""

from datetime import timedelta

import pytest
from django.utils import timezone

from controlplane.alerts.evaluation import evaluate
from controlplane.alerts.models import Alert, AlertGroup, AlertNotification, Silence
from controlplane.alerts.services.lifecycle import alert_group_acknowledge, silence_create, silence_expire
from controlplane.audit.models import AuditEntry
from controlplane.lib.errors import Conflict, InvalidField

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def webhook_on(settings):
    """Queue notifications (the outbox) without sending them: the URL is set, delivery is tested elsewhere."""
    settings.ALERT_WEBHOOK_URL = "http://127.0.0.1:9/unused"
    settings.CELERY_TASK_ALWAYS_EAGER = False


@pytest.fixture(autouse=True)
def no_delivery(monkeypatch):
    monkeypatch.setattr("controlplane.alerts.evaluation._enqueue", lambda ids: None)


def lose(fleet, clock, *names):
    """Disconnect nodes and run a pass: node-lost fires at once (for 0 s), critical."""
    for name in names:
        fleet.disconnect(name)
    return evaluate(now=clock.tick(2))


def notifications() -> list[tuple[str, str, list[str]]]:
    return [
        (
            n.status,
            n.payload["groupLabels"].get("pool", ""),
            sorted(a["labels"].get("node", "") for a in n.payload["alerts"]),
        )
        for n in AlertNotification.objects.order_by("id")
    ]


def test_one_incident_per_rule_and_pool_listing_every_node(fleet, clock):
    for name in ("p-1", "p-2", "p-3"):
        fleet.add(name)
    fleet.add("s-1", pool=fleet.staging)
    lose(fleet, clock, "p-1", "p-2")
    lose(fleet, clock, "p-3", "s-1")
    incidents = AlertGroup.objects.filter(state="firing").order_by("key")
    assert [g.key for g in incidents] == ["node-lost:prod-main", "node-lost:staging"]
    prod = incidents[0]
    assert sorted(prod.alerts.values_list("name", flat=True)) == ["p-1", "p-2", "p-3"]
    # One page per incident: prod-main's third node joined the open incident without a second page.
    assert sorted(notifications()) == [("firing", "prod-main", ["p-1", "p-2"]), ("firing", "staging", ["s-1"])]

    fleet.connect("p-1", at=clock.tick(2))
    evaluate(now=clock.now)
    prod.refresh_from_db()
    assert prod.state == "firing"  # p-2 and p-3 still lost... until they are back too
    for name in ("p-2", "p-3", "s-1"):
        fleet.connect(name, at=clock.now)
    evaluate(now=clock.tick(1))
    prod.refresh_from_db()
    assert prod.state == "resolved"
    resolved = sorted(n for n in notifications() if n[0] == "resolved")
    assert resolved == [("resolved", "prod-main", ["p-1", "p-2", "p-3"]), ("resolved", "staging", ["s-1"])]


def test_a_new_firing_after_resolution_opens_a_new_incident(fleet, clock):
    fleet.add("p-1")
    lose(fleet, clock, "p-1")
    fleet.connect("p-1", at=clock.tick(1))
    evaluate(now=clock.now)
    lose(fleet, clock, "p-1")
    assert list(AlertGroup.objects.order_by("id").values_list("state", flat=True)) == ["resolved", "firing"]
    assert Alert.objects.filter(name="p-1", rule__name="node-lost").count() == 2


def test_silenced_alerts_show_but_do_not_notify_until_the_silence_ends(fleet, clock, users):
    fleet.add("p-1")
    fleet.add("p-2")
    silence = silence_create(
        actor=users["oncall"], node="p-1", rule="node-lost", duration_minutes=30, reason="host in maintenance"
    )
    assert silence.matches(rule="node-lost", pool="prod-main", node="p-1")
    assert not silence.matches(rule="node-lost", pool="prod-main", node="p-2")
    assert not silence.matches(rule="p99-latency", pool="prod-main", node="p-1")

    lose(fleet, clock, "p-1")
    alert = Alert.objects.get(name="p-1", rule__name="node-lost")
    assert (alert.state, alert.is_silenced) == ("firing", True)
    assert AlertGroup.objects.get().state == "firing"  # it shows on the on-call page...
    assert notifications() == []  # ...but pages nobody

    lose(fleet, clock, "p-2")  # an unsilenced node of the same incident: now it is news
    assert notifications() == [("firing", "prod-main", ["p-2"])]

    silence_expire(actor=users["sre"], silence=silence, reason="maintenance over")
    alert.refresh_from_db()
    assert not alert.is_silenced
    evaluate(now=clock.tick(2))  # same severity already sent: nothing new to say
    assert len(notifications()) == 1


def test_a_silence_that_ends_by_itself_makes_its_incident_heard(fleet, clock, users):
    fleet.add("p-1")
    silence = silence_create(actor=users["oncall"], pool="prod-main", duration_minutes=1, reason="deploying")
    window = {"starts_at": clock.now - timedelta(seconds=5), "ends_at": clock.now + timedelta(seconds=30)}
    Silence.objects.filter(pk=silence.pk).update(**window)
    lose(fleet, clock, "p-1")
    assert notifications() == []
    evaluate(now=clock.tick(40))  # the silence is over
    assert not Alert.objects.get(name="p-1").is_silenced
    assert notifications() == [("firing", "prod-main", ["p-1"])]


def test_silence_needs_a_matcher_a_reason_and_a_sane_duration(users):
    oncall = users["oncall"]
    with pytest.raises(InvalidField, match="at least one matcher"):
        silence_create(actor=oncall, duration_minutes=30, reason="x")
    with pytest.raises(InvalidField, match="reason"):
        silence_create(actor=oncall, rule="node-lost", duration_minutes=30, reason=" ")
    with pytest.raises(InvalidField, match="duration_minutes"):
        silence_create(actor=oncall, rule="node-lost", duration_minutes=0, reason="x")
    with pytest.raises(InvalidField, match="duration_minutes"):
        silence_create(actor=oncall, rule="node-lost", duration_minutes=8 * 24 * 60, reason="x")
    assert not Silence.objects.exists()


def test_expired_or_ended_silences_cannot_be_ended_again(users):
    silence = silence_create(actor=users["oncall"], rule="node-lost", duration_minutes=30, reason="x")
    silence_expire(actor=users["oncall"], silence=silence, reason="done")
    with pytest.raises(Conflict):
        silence_expire(actor=users["oncall"], silence=silence, reason="again")
    silence.refresh_from_db()
    assert not silence.is_active(timezone.now())


def test_acknowledge_records_who_and_why_and_keeps_the_incident_firing(fleet, clock, users):
    fleet.add("p-1")
    lose(fleet, clock, "p-1")
    group = AlertGroup.objects.get()
    alert_group_acknowledge(actor=users["oncall"], group=group, note="checking the host's PSU")
    group.refresh_from_db()
    assert (group.state, group.acknowledged_by.username, group.acknowledgement_note) == (
        "firing",
        "oncall",
        "checking the host's PSU",
    )
    entry = AuditEntry.objects.get(action="alert.acknowledge")
    assert entry.actor_name == "oncall" and entry.reason == "checking the host's PSU"
    assert entry.after["acknowledged_by"] == "oncall"
    assert group.events.filter(kind="acknowledged", actor=users["oncall"]).exists()

    fleet.connect("p-1", at=clock.tick(2))
    evaluate(now=clock.now)
    with pytest.raises(Conflict, match="resolved"):
        alert_group_acknowledge(actor=users["oncall"], group=group, note="late")


def test_escalation_of_an_incident_is_notified_again(fleet, clock):
    fleet.add("p-1")
    fleet.sample("p-1", clock.now, fragmentation_ratio=0.25)
    for _ in range(31):  # 60 s of warning
        evaluate(now=clock.now)
        fleet.sample("p-1", clock.tick(2), fragmentation_ratio=0.25)
    assert notifications() == [("firing", "prod-main", ["p-1"])]
    for _ in range(31):  # 60 s of critical
        fleet.sample("p-1", clock.tick(2), fragmentation_ratio=0.4)
        evaluate(now=clock.now)
    assert [n[0] for n in notifications()] == ["firing", "firing"]
    latest = AlertNotification.objects.order_by("-id").first().payload
    assert latest["commonLabels"]["severity"] == "critical"
