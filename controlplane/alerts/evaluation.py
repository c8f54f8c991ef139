"""One evaluation pass: every enabled rule over every entity of its scope, driving alerts, incidents and notifications.

The pass reads everything it needs up front in a fixed number of queries (rules, open alerts and incidents,
silences, the latest samples of each scope through `controlplane.metrics.selectors`, the node table), decides in
memory, and writes back in bulk, so its cost in queries does not grow with the fleet.

Per alert (fingerprint = rule + scope + entity name):
- a fresh sample whose value breaks the warning threshold opens a *pending* alert; once the condition has held
  for the rule's `for_s` it *fires* (warning, or critical when the critical condition has held that long too);
- while firing, the severity follows whichever condition has held for `for_s`: escalation and de-escalation are
  recorded as events;
- a value back on the right side of the line (or null in a fresh sample: nothing to measure, e.g. no requests)
  *resolves* it; a pending alert that never fired is closed quietly;
- no fresh sample at all is *unknown*, not OK: the alert keeps its state and is marked stale;
- a null figure the node has no source for (fragmentation on the vLLM CPU build, SM activity without DCGM, see
  coverage.py) is *no source*, not OK either: it resolves nothing and opens nothing; an open alert keeps its state
  and is marked stale, and the pages list the node's uncovered rules.

Firing alerts of one rule in one pool form one incident (`AlertGroup`): one page, however many nodes. The
webhook hears of an incident when it fires, escalates or resolves, counting only alerts no silence matches.

What a pass reads and the signals it derives itself (node lost, restarts, the trend detectors, ...) live in
`controlplane/alerts/derived.py`; this module decides and writes.
"""

import hashlib
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from controlplane.alerts import realtime as alerts_realtime
from controlplane.alerts import selectors
from controlplane.alerts.coverage import NoSource
from controlplane.alerts.derived import UNKNOWN, PassInputs
from controlplane.alerts.models import (
    SEVERITY_RANK,
    Alert,
    AlertEvent,
    AlertGroup,
    AlertNotification,
    AlertRuleVersion,
    EvaluatorLease,
    Severity,
)
from controlplane.alerts.notifications import webhook_payload
from controlplane.lib import background

# A stored value is refreshed (written and pushed to browsers) at most this often when nothing else changes.
VALUE_REFRESH_S = 10.0
# A claimed pass that never finished (worker killed) frees the lease after this long.
LEASE_S = 30.0
# Two beat ticks closer than this (duplicate beat, clock skew) run one pass.
MIN_GAP_S = 1.0


def fingerprint(rule: str, scope: str, name: str) -> str:
    return hashlib.sha256(f"{rule}|{scope}|{name}".encode()).hexdigest()[:16]


def group_key(rule: str, pool: str) -> str:
    return f"{rule}:{pool or '*'}"


@dataclass
class PassReport:
    """What one pass did, for the task's log, the benchmark and tests."""

    rules: int = 0
    entities: int = 0
    alerts_written: int = 0
    events: int = 0
    notifications: int = 0
    no_source: int = 0  # entities whose rule had no source for its figure
    queries: int = 0
    duration_ms: float = 0.0
    claimed: bool = True
    incidents_notified: list[int] = field(default_factory=list)


def evaluate(*, now: datetime | None = None) -> PassReport:
    """Run one pass at `now` (tests pass a fake clock); the caller makes sure only one runs at a time."""
    now = now or timezone.now()
    counter = _QueryCounter()
    started = time.perf_counter()
    with connection.execute_wrapper(counter), transaction.atomic():
        report = _Pass(now).run()
    report.queries = counter.count
    report.duration_ms = (time.perf_counter() - started) * 1000
    return report


def evaluate_claimed(*, now: datetime | None = None) -> PassReport:
    """A pass, if this worker wins the lease (a conditional UPDATE on one row); otherwise nothing."""
    now = now or timezone.now()
    EvaluatorLease.objects.get_or_create(pk=1)
    free = Q(lease_until__isnull=True) | Q(lease_until__lt=now)
    spaced = Q(last_started_at__isnull=True) | Q(last_started_at__lte=now - timedelta(seconds=MIN_GAP_S))
    claimed = EvaluatorLease.objects.filter(free, spaced, pk=1).update(
        lease_until=now + timedelta(seconds=LEASE_S), last_started_at=now
    )
    if not claimed:
        return PassReport(claimed=False)
    try:
        report = evaluate(now=now)
    finally:
        EvaluatorLease.objects.filter(pk=1).update(lease_until=None, last_finished_at=timezone.now())
    # Only a pass that got through counts as evaluation running (the on-call page says when it last did).
    EvaluatorLease.objects.filter(pk=1).update(
        last_duration_ms=report.duration_ms, last_queries=report.queries, last_succeeded_at=timezone.now()
    )
    return report


class _QueryCounter:
    def __init__(self):
        self.count = 0

    def __call__(self, execute, sql, params, many, context):
        self.count += 1
        return execute(sql, params, many, context)


class _Pass:
    def __init__(self, now: datetime):
        self.now = now
        self.report = PassReport()
        self.versions = list(selectors.current_rule_versions(enabled_only=True))
        self.report.rules = len(self.versions)
        self.open: dict[str, Alert] = {
            a.fingerprint: a
            for a in Alert.objects.exclude(state=Alert.State.RESOLVED).select_related("rule", "group__rule")
        }
        self.groups: dict[str, AlertGroup] = {
            g.key: g for g in AlertGroup.objects.filter(state=AlertGroup.State.FIRING).select_related("rule")
        }
        for alert in self.open.values():
            if alert.group is not None and alert.group.key in self.groups:
                alert.group = self.groups[alert.group.key]  # one instance per incident in this pass
        self.silences = list(selectors.active_silences(now=now))
        self.visited: set[str] = set()
        self.new_alerts: list[Alert] = []
        self.dirty: dict[str, Alert] = {}
        self.events: list[AlertEvent] = []
        self.touched_groups: set[str] = set()
        self.opened_groups: set[str] = set()
        self.inputs = PassInputs(now)

    # --- the pass ------------------------------------------------------------------------------------------

    def run(self) -> PassReport:
        for version in self.versions:
            for name, pool, value in self.inputs.entities(version):
                self.report.entities += 1
                self.step(version, name, pool, value)
        for fp, alert in self.open.items():
            if fp not in self.visited:
                # The rule was disabled or changed scope, or the entity is gone: nothing left to watch.
                self.resolve(alert)
        self.apply_silences()
        self.write()
        return self.report

    def step(self, version: AlertRuleVersion, name: str, pool: str, value) -> None:
        rule = version.rule
        fp = fingerprint(rule.name, version.scope, name)
        self.visited.add(fp)
        alert = self.open.get(fp)
        if isinstance(value, NoSource):
            self.report.no_source += 1
        if value is UNKNOWN or isinstance(value, NoSource):
            if alert is not None and not alert.is_stale:
                alert.is_stale, alert.stale_since = True, self.now
                self.mark(alert)
            return
        holds_warn = value is not None and version.holds(value, version.warn)
        holds_critical = value is not None and version.holds(value, version.critical)
        if not (holds_warn or holds_critical):
            if alert is not None:
                self.resolve(alert, value=value)
            return
        now = self.now
        if alert is None:
            alert = Alert(
                fingerprint=fp,
                rule=rule,
                rule_version=version,
                scope=version.scope,
                name=name,
                pool=pool,
                state=Alert.State.PENDING,
                severity=Severity.CRITICAL if holds_critical else Severity.WARNING,
                value=value,
                value_at=now,
                warn_since=now,
                critical_since=now if holds_critical else None,
                started_at=now,
            )
            self.open[fp] = alert
            self.new_alerts.append(alert)
            self.event(alert, AlertEvent.Kind.PENDING)
        else:
            significant = alert.is_stale or alert.rule_version_id != version.pk or alert.pool != pool
            if alert.is_stale and alert.state == Alert.State.PENDING:
                # The value was unknown meanwhile, so nobody saw the condition hold: `for` counts observed time and
                # starts again, instead of firing at once on the first fresh sample.
                alert.warn_since = now
                alert.critical_since = now if holds_critical else None
            alert.is_stale, alert.stale_since = False, None
            alert.rule_version = version
            alert.pool = pool
            if alert.warn_since is None:
                alert.warn_since = now
                significant = True
            critical_since = (alert.critical_since or now) if holds_critical else None
            if critical_since != alert.critical_since:
                alert.critical_since = critical_since
                significant = True
            refresh = (now - alert.value_at).total_seconds() >= VALUE_REFRESH_S and alert.value != value
            if significant or refresh:
                alert.value, alert.value_at = value, now
                self.mark(alert)
        held = self.held_severity(version, alert)
        if alert.state == Alert.State.PENDING:
            shown = Severity.CRITICAL if holds_critical else Severity.WARNING
            if held is not None:
                alert.state, alert.fired_at, alert.severity = Alert.State.FIRING, now, held
                alert.value, alert.value_at = value, now
                self.join_group(alert)
                self.event(alert, AlertEvent.Kind.FIRING)
                self.mark(alert)
            elif alert.severity != shown:
                alert.severity = shown
                self.mark(alert)
        elif held is not None and held != alert.severity:
            up = SEVERITY_RANK[held] > SEVERITY_RANK[alert.severity]
            alert.severity = held
            alert.value, alert.value_at = value, now
            self.event(alert, AlertEvent.Kind.ESCALATED if up else AlertEvent.Kind.DEESCALATED)
            self.touch(alert)
            self.mark(alert)

    def held_severity(self, version: AlertRuleVersion, alert: Alert) -> str | None:
        """The highest severity whose condition has held for the rule's `for_s`, or None."""
        need = timedelta(seconds=version.for_s)
        if alert.critical_since is not None and self.now - alert.critical_since >= need:
            return Severity.CRITICAL
        if alert.warn_since is not None and self.now - alert.warn_since >= need:
            return Severity.WARNING
        return None

    def resolve(self, alert: Alert, *, value=None) -> None:
        alert.state, alert.resolved_at, alert.is_stale, alert.stale_since = Alert.State.RESOLVED, self.now, False, None
        alert.warn_since = alert.critical_since = None
        if value is not None:
            alert.value, alert.value_at = value, self.now
        if alert.fired_at is not None:
            self.event(alert, AlertEvent.Kind.RESOLVED)
            self.touch(alert)
        self.mark(alert)

    def join_group(self, alert: Alert) -> None:
        key = group_key(alert.rule.name, alert.pool)
        group = self.groups.get(key)
        if group is None:
            group = AlertGroup.objects.create(
                key=key,
                rule=alert.rule,
                pool=alert.pool,
                severity=alert.severity,
                opened_at=self.now,
                updated_at=self.now,
            )
            self.groups[key] = group
            self.opened_groups.add(key)
            self.events.append(
                AlertEvent(group=group, kind=AlertEvent.Kind.FIRING, severity=group.severity, at=self.now)
            )
        alert.group = group
        self.touched_groups.add(key)

    def event(self, alert: Alert, kind: str) -> None:
        self.events.append(AlertEvent(alert=alert, kind=kind, severity=alert.severity, value=alert.value, at=self.now))

    def touch(self, alert: Alert) -> None:
        if alert.group is not None:
            self.touched_groups.add(alert.group.key)

    def mark(self, alert: Alert) -> None:
        self.dirty[alert.fingerprint] = alert

    def apply_silences(self) -> None:
        for alert in self.open.values():
            if alert.state == Alert.State.RESOLVED:
                continue
            silenced = selectors.silenced_by(self.silences, rule=alert.rule.name, pool=alert.pool, node=alert.node)
            if silenced != alert.is_silenced:
                alert.is_silenced = silenced
                self.mark(alert)
                self.touch(alert)

    # --- writing back --------------------------------------------------------------------------------------

    def write(self) -> None:
        new_ids = {id(a) for a in self.new_alerts}
        if self.new_alerts:
            Alert.objects.bulk_create(self.new_alerts)
        updated = [a for a in self.dirty.values() if id(a) not in new_ids]
        if updated:
            Alert.objects.bulk_update(
                updated,
                [
                    "rule_version", "pool", "state", "severity", "value", "value_at", "is_stale", "stale_since",
                    "is_silenced", "warn_since", "critical_since", "fired_at", "resolved_at", "group",
                ],
                batch_size=500,
            )  # fmt: skip
        written = {a.fingerprint: a for a in (*self.new_alerts, *self.dirty.values())}
        self.report.alerts_written = len(written)
        changed_incidents, notifications, notify = self.settle_groups()
        if self.events:
            AlertEvent.objects.bulk_create(self.events)
        if notifications:
            AlertNotification.objects.bulk_create(notifications)
        self.report.events = len(self.events)
        self.report.notifications = len(notifications)
        self.report.incidents_notified = notify
        if written or changed_incidents:
            alert_ids = [a.pk for a in written.values()]
            transaction.on_commit(
                lambda: alerts_realtime.alerts_changed(
                    alert_ids=alert_ids, incident_ids=changed_incidents, notify=notify, from_evaluator=True
                )
            )
        if notifications:
            ids = [n.pk for n in notifications]
            transaction.on_commit(lambda: _enqueue(ids))

    def settle_groups(self) -> tuple[list[int], list[AlertNotification], list[int]]:
        """Recompute every open incident's severity and state; decide what the webhook and browsers hear.

        Every open incident is looked at (in memory), not only those this pass touched: a silence that ended or
        was created between passes changes what is audible without any alert changing.
        """
        # The in-memory alerts are the truth for this pass; index them by incident.
        members: dict[str, list[Alert]] = defaultdict(list)
        for alert in self.open.values():
            if alert.group is not None and alert.group.key in self.groups:
                members[alert.group.key].append(alert)
        webhook_on = bool(settings.ALERT_WEBHOOK_URL)
        notifications, notify, changed = [], [], []
        for key, group in self.groups.items():
            if group.state != AlertGroup.State.FIRING:
                continue
            alerts = members.get(key, [])
            firing = [a for a in alerts if a.state == Alert.State.FIRING]
            loud = [a for a in firing if not a.is_silenced]
            before = (group.state, group.severity, group.notified_severity)
            if firing:
                severity = max((a.severity for a in firing), key=SEVERITY_RANK.__getitem__)
                if severity != group.severity and key not in self.opened_groups:
                    up = SEVERITY_RANK[severity] > SEVERITY_RANK[group.severity]
                    kind = AlertEvent.Kind.ESCALATED if up else AlertEvent.Kind.DEESCALATED
                    self.events.append(AlertEvent(group=group, kind=kind, severity=severity, at=self.now))
                group.severity = severity
                audible = max((a.severity for a in loud), key=SEVERITY_RANK.__getitem__, default="")
                if SEVERITY_RANK[audible] > SEVERITY_RANK[group.notified_severity]:
                    notify.append(group.pk)
                    if webhook_on:
                        notifications.append(self.notification(group, loud, "firing"))
                # Lowered too (de-escalation, silence): a later rise is news again and is sent again.
                group.notified_severity = audible
            else:
                group.state, group.resolved_at = AlertGroup.State.RESOLVED, self.now
                self.events.append(AlertEvent(group=group, kind=AlertEvent.Kind.RESOLVED, at=self.now))
                if group.notified_severity and webhook_on:
                    # Every alert the incident ever had (written above), as Alertmanager's resolved message does.
                    everyone = list(group.alerts.select_related("rule", "rule_version").order_by("name"))
                    notifications.append(self.notification(group, everyone, "resolved"))
                group.notified_severity = ""
            if key in self.touched_groups or (group.state, group.severity, group.notified_severity) != before:
                group.updated_at = self.now
                group.save(update_fields=["state", "severity", "resolved_at", "notified_severity", "updated_at"])
                changed.append(group.pk)
        return changed, notifications, notify

    def notification(self, group: AlertGroup, alerts: list[Alert], status: str) -> AlertNotification:
        return AlertNotification(
            group=group,
            status=status,
            payload=webhook_payload(group=group, alerts=alerts, status=status),
            created_at=self.now,
        )


def _enqueue(notification_ids: list[int]) -> None:
    """Hand each queued message to a worker; eagerly to a daemon thread: a slow or dead receiver must not hold the
    pass up (the eager delivery keeps its retries and their waits there: controlplane/alerts/tasks.py)."""
    for pk in notification_ids:
        background.start("controlplane.alerts.tasks.alert_notification_send", pk, name=f"alert-webhook-{pk}")
