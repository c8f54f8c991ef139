"""Alert rules (named series of immutable versions), the alerts they raise, incidents, silences and the outbox."""

import operator

from django.conf import settings
from django.db import models
from django.db.models import Q

from controlplane.alerts import signals
from controlplane.lib.errors import DomainError


class Severity(models.TextChoices):
    WARNING = "warning"
    CRITICAL = "critical"


SEVERITY_RANK = {"": 0, Severity.WARNING: 1, Severity.CRITICAL: 2}


class AlertRule(models.Model):
    """A named alert rule (e.g. `p99-latency`); what it watches lives in its versions, the newest one applies."""

    name = models.SlugField(max_length=64, unique=True)
    latest_number = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class AlertRuleVersion(models.Model):
    """One immutable revision of a rule: metric, scope, comparison, thresholds, `for` duration and runbook.

    `author` is null for the default pack, which the migration installs before any user exists.
    """

    class Scope(models.TextChoices):
        FLEET = signals.FLEET
        POOL = signals.POOL
        NODE = signals.NODE

    class Comparison(models.TextChoices):
        GT = "gt", ">"
        GE = "ge", "≥"
        LT = "lt", "<"
        LE = "le", "≤"

    rule = models.ForeignKey(AlertRule, on_delete=models.PROTECT, related_name="versions")
    number = models.PositiveIntegerField()
    base_number = models.PositiveIntegerField(null=True, blank=True)
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    comment = models.CharField(max_length=500, blank=True)

    metric = models.CharField(max_length=64, choices=signals.SIGNAL_CHOICES)
    scope = models.CharField(max_length=8, choices=Scope.choices)
    comparison = models.CharField(max_length=2, choices=Comparison.choices)
    warn = models.FloatField()
    critical = models.FloatField(null=True, blank=True)  # null: the rule only ever warns
    for_s = models.PositiveIntegerField()
    runbook = models.SlugField(max_length=64)
    summary = models.CharField(max_length=300)
    is_enabled = models.BooleanField(default=True)

    # The fields a new version may change; the audit entry of an edit shows the ones that did.
    EDITABLE = ("metric", "scope", "comparison", "warn", "critical", "for_s", "runbook", "summary", "is_enabled")

    class Meta:
        ordering = ["rule", "-number"]
        constraints = [
            models.UniqueConstraint(fields=["rule", "number"], name="alert_rule_version_number_unique"),
            models.CheckConstraint(condition=Q(number__gte=1), name="alert_rule_version_number_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.rule.name} v{self.number}"

    def save(self, *args, **kwargs):
        if self.pk is not None:
            raise DomainError("alert rule versions are immutable; save a new version")
        super().save(*args, **kwargs)

    def fields(self) -> dict:
        return {name: getattr(self, name) for name in self.EDITABLE}

    def holds(self, value: float, threshold: float | None) -> bool:
        """Whether `value` breaks `threshold` in this rule's direction."""
        if threshold is None:
            return False
        return _COMPARE[self.comparison](value, threshold)

    @property
    def condition_text(self) -> str:
        symbol = self.Comparison(self.comparison).label
        warn = signals.format_threshold(self.metric, self.warn)
        if self.critical is not None and self.critical == self.warn:
            text = f"{self.metric} {symbol} {warn}: critical"
        else:
            text = f"{self.metric} {symbol} {warn} warn"
            if self.critical is not None:
                text += f" / {signals.format_threshold(self.metric, self.critical)} critical"
        return text + (f" for {self.for_s} s" if self.for_s else "")


_COMPARE = {"gt": operator.gt, "ge": operator.ge, "lt": operator.lt, "le": operator.le}


class AlertGroup(models.Model):
    """One incident: the firing alerts of one rule in one pool (one page, however many nodes are affected)."""

    class State(models.TextChoices):
        FIRING = "firing"
        RESOLVED = "resolved"

    key = models.CharField(max_length=140)  # `<rule>:<pool>`; `*` for fleet scope
    rule = models.ForeignKey(AlertRule, on_delete=models.PROTECT, related_name="groups")
    pool = models.CharField(max_length=64, blank=True)
    state = models.CharField(max_length=8, choices=State.choices, default=State.FIRING)
    severity = models.CharField(max_length=8, choices=Severity.choices)
    opened_at = models.DateTimeField()
    resolved_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField()
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    acknowledged_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    acknowledgement_note = models.TextField(blank=True)
    # What the webhook last said about this incident: "" (nothing yet, e.g. every alert silenced) or the severity.
    notified_severity = models.CharField(max_length=8, blank=True)

    class Meta:
        ordering = ["-opened_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["key"], condition=Q(state="firing"), name="alert_group_one_open_per_key"),
        ]

    def __str__(self) -> str:
        return f"{self.rule.name} in {self.pool or 'the fleet'} (#{self.pk})"


class Alert(models.Model):
    """One rule breaking on one entity (a node, a pool or the fleet): pending, then firing, then resolved."""

    class State(models.TextChoices):
        PENDING = "pending"
        FIRING = "firing"
        RESOLVED = "resolved"

    fingerprint = models.CharField(max_length=16, db_index=True)  # of rule + scope + name, stable across firings
    rule = models.ForeignKey(AlertRule, on_delete=models.PROTECT, related_name="alerts")
    rule_version = models.ForeignKey(AlertRuleVersion, on_delete=models.PROTECT, related_name="+")
    scope = models.CharField(max_length=8, choices=AlertRuleVersion.Scope.choices)
    name = models.CharField(max_length=64)  # the node's, the pool's, or "fleet"
    pool = models.CharField(max_length=64, blank=True)
    state = models.CharField(max_length=8, choices=State.choices, default=State.PENDING)
    severity = models.CharField(max_length=8, choices=Severity.choices)
    value = models.FloatField(null=True, blank=True)
    # The last pass had no fresh sample for this entity: the value is unknown, and nothing moved.
    is_stale = models.BooleanField(default=False)
    # Since when it is stale: a pending alert waits for data, and its `for` starts again once data comes back.
    stale_since = models.DateTimeField(null=True, blank=True)
    is_silenced = models.BooleanField(default=False)
    # When the warning and the critical condition began holding without a break; `for_s` counts from these.
    warn_since = models.DateTimeField(null=True, blank=True)
    critical_since = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField()
    fired_at = models.DateTimeField(null=True, blank=True)
    resolved_at = models.DateTimeField(null=True, blank=True)
    value_at = models.DateTimeField()  # when `value` was stored; refreshed at least every VALUE_REFRESH_S
    group = models.ForeignKey(AlertGroup, null=True, blank=True, on_delete=models.PROTECT, related_name="alerts")

    class Meta:
        ordering = ["-started_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["fingerprint"], condition=~Q(state="resolved"), name="alert_one_open_per_fingerprint"
            ),
        ]
        indexes = [models.Index(fields=["state"], name="alert_state_idx")]

    def __str__(self) -> str:
        return f"{self.rule.name} on {self.name}"

    @property
    def node(self) -> str:
        return self.name if self.scope == signals.NODE else ""


class AlertEvent(models.Model):
    """One step of an alert's or an incident's life: fired, escalated, de-escalated, resolved, acknowledged."""

    class Kind(models.TextChoices):
        PENDING = "pending"
        FIRING = "firing"
        ESCALATED = "escalated"
        DEESCALATED = "de-escalated"
        RESOLVED = "resolved"
        ACKNOWLEDGED = "acknowledged"

    alert = models.ForeignKey(Alert, null=True, blank=True, on_delete=models.CASCADE, related_name="events")
    group = models.ForeignKey(AlertGroup, null=True, blank=True, on_delete=models.CASCADE, related_name="events")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    severity = models.CharField(max_length=8, blank=True)
    value = models.FloatField(null=True, blank=True)
    at = models.DateTimeField()
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    note = models.TextField(blank=True)

    class Meta:
        ordering = ["at", "id"]

    def __str__(self) -> str:
        return f"{self.kind} at {self.at:%H:%M:%S}"


class Silence(models.Model):
    """Alerts matching every non-empty matcher (rule, pool, node) still show, but notify nobody until `ends_at`."""

    rule = models.CharField(max_length=64, blank=True)
    pool = models.CharField(max_length=64, blank=True)
    node = models.CharField(max_length=64, blank=True)
    reason = models.TextField()
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField()
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    expired_at = models.DateTimeField(null=True, blank=True)  # ended early by hand
    expired_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            # A silence with no matcher would silence everything; that is never what someone means.
            models.CheckConstraint(condition=~Q(rule="", pool="", node=""), name="silence_has_a_matcher"),
        ]

    def __str__(self) -> str:
        return "silence " + ", ".join(f"{k}={v}" for k, v in self.matchers.items())

    @property
    def matchers(self) -> dict[str, str]:
        return {k: v for k, v in (("rule", self.rule), ("pool", self.pool), ("node", self.node)) if v}

    def is_active(self, now) -> bool:
        return self.expired_at is None and self.starts_at <= now < self.ends_at

    def matches(self, *, rule: str, pool: str, node: str) -> bool:
        return (
            (not self.rule or self.rule == rule)
            and (not self.pool or self.pool == pool)
            and (not self.node or self.node == node)
        )


class AlertNotification(models.Model):
    """One webhook message (Alertmanager's format) about an incident, queued in the evaluation's transaction."""

    group = models.ForeignKey(AlertGroup, on_delete=models.CASCADE, related_name="notifications")
    status = models.CharField(max_length=8)  # firing | resolved
    payload = models.JSONField()
    created_at = models.DateTimeField()
    claimed_at = models.DateTimeField(null=True, blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.status} #{self.group_id}"


class EvaluatorLease(models.Model):
    """The one row evaluation passes claim (conditional UPDATE), so several workers never evaluate at once."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    lease_until = models.DateTimeField(null=True, blank=True)
    last_started_at = models.DateTimeField(null=True, blank=True)
    last_finished_at = models.DateTimeField(null=True, blank=True)
    # The last pass that completed without an error: pending alerts can fire only while this moves.
    last_succeeded_at = models.DateTimeField(null=True, blank=True)
    last_duration_ms = models.FloatField(null=True, blank=True)
    last_queries = models.PositiveIntegerField(null=True, blank=True)

    def __str__(self) -> str:
        return "alert evaluator"


class NodeRestartTrack(models.Model):
    """The engine-restart counter a node reported last and its recent increases, for `engine_restarts_10m`.

    Kept by the evaluator so the rule costs one query a pass, not a 10-minute sample scan per node.
    """

    node = models.CharField(max_length=64, unique=True)
    value = models.PositiveIntegerField()
    increases = models.JSONField(default=list)  # [[unix time, increase], ...] within the window

    def __str__(self) -> str:
        return self.node


class NodeTrendTrack(models.Model):
    """Points of a node's samples the trend detectors look back over (controlplane/alerts/detectors.py).

    One point every ALERT_TREND_POINT_S, kept for the longest detector window; written by the evaluator so the
    detectors cost one query a pass, not a scan of minutes of 1 s rows per node.
    """

    node = models.CharField(max_length=64, unique=True)
    # [[unix time, qps, batch_timeout_rate, requests_waiting, gpu_util, gpu_memory_used], ...], oldest first.
    points = models.JSONField(default=list)
    last_point_at = models.FloatField(null=True, blank=True)  # unix time of the newest point
    # The detectors' values as of the newest point: {"batch_timeout_drop": ..., "gpu_memory_leak": ...}.
    values = models.JSONField(default=dict)

    def __str__(self) -> str:
        return self.node
