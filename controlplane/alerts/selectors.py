"""Reads about alerts: rules in force, open incidents and alerts, silences, and their summaries for pages and events."""

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import F, Prefetch, QuerySet
from django.urls import reverse
from django.utils import timezone

from controlplane.alerts import signals
from controlplane.alerts.models import Alert, AlertGroup, AlertRule, AlertRuleVersion, EvaluatorLease, Silence
from controlplane.lib.when import clock, duration

# How many affected entities an incident summary lists by name; the count is always complete.
AFFECTED_LISTED = 50
RESOLVED_RECENTLY = timedelta(hours=24)


def current_rule_versions(*, enabled_only: bool = False) -> QuerySet[AlertRuleVersion]:
    """The newest version of every rule: the one that applies."""
    versions = AlertRuleVersion.objects.filter(number=F("rule__latest_number")).select_related("rule", "author")
    if enabled_only:
        versions = versions.filter(is_enabled=True)
    return versions.order_by("rule__name")


def rule_current_version(rule: AlertRule) -> AlertRuleVersion:
    return rule.versions.select_related("author").get(number=rule.latest_number)


def open_alerts() -> QuerySet[Alert]:
    return Alert.objects.exclude(state=Alert.State.RESOLVED).select_related("rule_version", "rule")


def pending_alerts() -> QuerySet[Alert]:
    return Alert.objects.filter(state=Alert.State.PENDING, group__isnull=True).select_related("rule_version", "rule")


def with_alerts(groups: QuerySet[AlertGroup], *, open_only: bool) -> QuerySet[AlertGroup]:
    alerts = Alert.objects.select_related("rule_version").order_by("name")
    if open_only:
        alerts = alerts.exclude(state=Alert.State.RESOLVED)
    return groups.select_related("rule", "acknowledged_by").prefetch_related(
        Prefetch("alerts", queryset=alerts, to_attr="listed_alerts")
    )


def open_incidents() -> QuerySet[AlertGroup]:
    return with_alerts(AlertGroup.objects.filter(state=AlertGroup.State.FIRING), open_only=True)


def recently_resolved_incidents(*, now, limit: int = 20) -> list[AlertGroup]:
    groups = AlertGroup.objects.filter(state=AlertGroup.State.RESOLVED, resolved_at__gte=now - RESOLVED_RECENTLY)
    return list(with_alerts(groups.order_by("-resolved_at"), open_only=False)[:limit])


def incidents_by_id(ids) -> list[AlertGroup]:
    return list(with_alerts(AlertGroup.objects.filter(pk__in=list(ids)), open_only=False))


def active_silences(*, now) -> QuerySet[Silence]:
    return Silence.objects.filter(expired_at__isnull=True, starts_at__lte=now, ends_at__gt=now).select_related(
        "created_by"
    )


def silenced_by(silences, *, rule: str, pool: str, node: str) -> bool:
    return any(s.matches(rule=rule, pool=pool, node=node) for s in silences)


def _iso(value) -> str | None:
    return value.isoformat() if value else None


@dataclass(frozen=True)
class EvaluatorHealth:
    """Whether evaluation passes complete: a pending alert can fire only while they do."""

    is_running: bool
    last_succeeded_at: datetime | None = None
    text: str = ""  # why nothing can fire, when it is not running


EVALUATOR_RUNNING = EvaluatorHealth(True)


def evaluator_health(*, now: datetime | None = None) -> EvaluatorHealth:
    """Running when a pass completed within three periods (at least 10 s); else since when it has not."""
    now = now or timezone.now()
    period = float(settings.CELERY_BEAT_SCHEDULE["alerts-evaluate"]["schedule"])
    lease = EvaluatorLease.objects.filter(pk=1).only("last_succeeded_at").first()
    last = lease.last_succeeded_at if lease else None
    if last is not None and (now - last).total_seconds() <= max(3 * period, 10.0):
        return EvaluatorHealth(True, last)
    if last is None:
        return EvaluatorHealth(False, None, "alert evaluation has not completed a pass yet: nothing fires until then")
    ago = duration((now - last).total_seconds())
    return EvaluatorHealth(
        False, last, f"alert evaluation last completed a pass at {clock(last)} ({ago} ago): nothing fires until it runs"
    )


def alert_waiting_for(alert: Alert, *, now: datetime, evaluator: EvaluatorHealth) -> str:
    """What a pending alert waits for before it fires, in words; empty for the others."""
    if alert.state != Alert.State.PENDING:
        return ""
    version = alert.rule_version
    if not evaluator.is_running:
        return evaluator.text
    if alert.is_stale:
        since = f" since {clock(alert.stale_since)}" if alert.stale_since else ""
        return (
            f"no fresh data{since}: the value is unknown, so the {version.for_s} s count starts again once data "
            "shows the condition"
        )
    holding = alert.warn_since or alert.started_at
    fires_at = holding + timedelta(seconds=version.for_s)
    when = f"fires at {clock(fires_at)}" if fires_at > now else "due: fires at the next evaluation pass"
    return f"condition holding since {clock(holding)}; {when} unless it clears first"


def alert_summary(alert: Alert, *, evaluator: EvaluatorHealth | None = None, now: datetime | None = None) -> dict:
    """What the on-call page and the `alerts.changed` event show of one alert.

    A pending alert says what it waits for (`waiting_for`); `evaluator` is read when not given."""
    version = alert.rule_version
    now = now or timezone.now()
    if alert.state == Alert.State.PENDING and evaluator is None:
        evaluator = evaluator_health(now=now)
    holding = alert.warn_since or alert.started_at
    return {
        "id": alert.pk,
        "fingerprint": alert.fingerprint,
        "rule": alert.rule.name,
        "rule_version": version.number,
        "scope": alert.scope,
        "name": alert.name,
        "pool": alert.pool,
        "node": alert.node,
        "state": alert.state,
        "severity": alert.severity,
        "value": alert.value,
        "value_text": signals.format_value(version.metric, alert.value),
        "is_stale": alert.is_stale,
        "is_silenced": alert.is_silenced,
        "started_at": _iso(alert.started_at),
        # When the condition began holding without a break (the `for` counts from here), and when it fires.
        "holding_since": _iso(holding) if alert.state == Alert.State.PENDING and not alert.is_stale else None,
        "fires_at": _iso(holding + timedelta(seconds=version.for_s))
        if alert.state == Alert.State.PENDING and not alert.is_stale
        else None,
        "stale_since": _iso(alert.stale_since),
        "waiting_for": alert_waiting_for(alert, now=now, evaluator=evaluator) if evaluator else "",
        "fired_at": _iso(alert.fired_at),
        "resolved_at": _iso(alert.resolved_at),
        "for_s": version.for_s,
        "condition": version.condition_text,
        "summary": version.summary,
        "runbook": version.runbook,
        "runbook_url": reverse("dashboard:runbook", kwargs={"slug": version.runbook}),
        "incident": alert.group_id,
    }


def incident_summary(group: AlertGroup) -> dict:
    """One incident with its affected entities; `group.listed_alerts` must be prefetched (see the queries above)."""
    alerts = getattr(group, "listed_alerts", None)
    if alerts is None:
        alerts = list(group.alerts.select_related("rule_version").order_by("name"))
    if group.state == AlertGroup.State.FIRING:
        # While it fires, the incident is what is still wrong; once resolved, everything it ever covered.
        alerts = [a for a in alerts if a.state != Alert.State.RESOLVED]
    firing = [a for a in alerts if a.state == Alert.State.FIRING]
    version = (alerts[0].rule_version if alerts else None) or group.rule.versions.get(number=group.rule.latest_number)
    return {
        "id": group.pk,
        "key": group.key,
        "rule": group.rule.name,
        "pool": group.pool,
        "state": group.state,
        "severity": group.severity,
        "opened_at": _iso(group.opened_at),
        "resolved_at": _iso(group.resolved_at),
        "summary": version.summary,
        "condition": version.condition_text,
        "runbook": version.runbook,
        "runbook_url": reverse("dashboard:runbook", kwargs={"slug": version.runbook}),
        "acknowledged_by": group.acknowledged_by.get_username() if group.acknowledged_by else None,
        "acknowledged_at": _iso(group.acknowledged_at),
        "acknowledgement_note": group.acknowledgement_note,
        "is_silenced": bool(firing) and all(a.is_silenced for a in firing),
        "affected_count": len(alerts),
        "affected": [
            {
                "alert": a.pk,
                "scope": a.scope,
                "name": a.name,
                "node": a.node,
                "state": a.state,
                "severity": a.severity,
                "value_text": signals.format_value(version.metric, a.value),
                "is_stale": a.is_stale,
                "is_silenced": a.is_silenced,
            }
            for a in alerts[:AFFECTED_LISTED]
        ],
    }
