"""The tuning knowledge base: one record per change to a pool (or replay comparison), with the pool's figures in a
window before and after it and what they say about the change."""

from datetime import timedelta

from django.conf import settings
from django.db import models


class ImpactRecord(models.Model):
    """A change and its measured effect: what changed, who and why, and the pool's figures before and after.

    Created by the service that makes the change (`services.impact_record_change`); the after-window is measured by
    a periodic task once it has passed (`status` pending -> measured). Before-window: [changed_at - window_before_s,
    changed_at); after-window: [changed_at + settle_s, changed_at + settle_s + window_after_s).
    """

    class Kind(models.TextChoices):
        PUBLISH = "publish"
        ROLLBACK = "rollback"
        CANARY_STAGE = "canary_stage"
        DEGRADATION_ON = "degradation_on"
        DEGRADATION_OFF = "degradation_off"
        CLEANUP = "cleanup"
        INTENT_MODEL_PUBLISH = "intent_model_publish"
        WARMUP_CHANGE = "warmup_change"
        REPLAY_COMPARISON = "replay_comparison"

    class Status(models.TextChoices):
        PENDING = "pending"
        MEASURED = "measured"

    class Outcome(models.TextChoices):
        IMPROVED = "improved"
        WORSENED = "worsened"
        MIXED = "mixed"
        NO_CHANGE = "no_change"
        INCONCLUSIVE = "inconclusive"

    kind = models.CharField(max_length=24, choices=Kind.choices)
    pool = models.ForeignKey("nodes.Pool", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    # Kept when the pool goes, so the record still says where the change happened.
    pool_name = models.CharField(max_length=64, blank=True)
    template = models.ForeignKey(
        "params.ParameterTemplate", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    version_before = models.ForeignKey(
        "params.TemplateVersion", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    version_after = models.ForeignKey(
        "params.TemplateVersion", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # A line for changes that are not a template version (an intent model, a warm-up dataset, a cleanup).
    subject = models.CharField(max_length=300, blank=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # "system" when the control plane made the change itself (a failed canary, automatic degradation).
    actor_name = models.CharField(max_length=150)
    reason = models.TextField(blank=True)
    changed_at = models.DateTimeField(db_index=True)
    # What produced the record: {"type": "pool_release", "id": 12}, {"type": "replay_comparison", "id": 3}, ...
    source = models.JSONField(default=dict, blank=True)
    window_before_s = models.PositiveIntegerField()
    window_after_s = models.PositiveIntegerField()
    # The after-window starts this long after the change: a cold change restarts engines, and each 1 s sample covers
    # the agents' last 10 s of requests, so the first seconds after a change mix both versions.
    settle_s = models.PositiveIntegerField(default=0)
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.PENDING)
    measured_at = models.DateTimeField(null=True, blank=True)
    # Per figure {median, mean, p90, samples} of the window; {} until measured.
    before = models.JSONField(default=dict, blank=True)
    after = models.JSONField(default=dict, blank=True)
    # Load similarity: {"qps_before", "qps_after", "qps_ratio", "tolerance", "nodes_before", "nodes_after"}.
    load = models.JSONField(default=dict, blank=True)
    # Per figure {verdict: improved|worsened|no_change|unknown, change, p_value, better}.
    conclusions = models.JSONField(default=dict, blank=True)
    outcome = models.CharField(max_length=16, choices=Outcome.choices, blank=True)
    # One sentence: why this outcome (the load shift or thin data when inconclusive).
    outcome_reason = models.TextField(blank=True)

    class Meta:
        ordering = ["-changed_at", "-id"]
        indexes = [
            # The measuring pass looks for pending records whose after-window has passed.
            models.Index(fields=["status", "changed_at"], name="impact_status_changed"),
            models.Index(fields=["pool_name", "changed_at"], name="impact_pool_changed"),
        ]

    def __str__(self) -> str:
        return f"impact {self.pk}: {self.kind} on {self.pool_name or '-'}"

    @property
    def after_since(self):
        return self.changed_at + timedelta(seconds=self.settle_s)

    @property
    def after_until(self):
        return self.after_since + timedelta(seconds=self.window_after_s)


class ImpactFieldChange(models.Model):
    """One parameter field a record's change touched (a row each, so records are searchable by dotted path on every
    database, and a field's page lists its history with one index scan)."""

    record = models.ForeignKey(ImpactRecord, on_delete=models.CASCADE, related_name="field_changes")
    path = models.CharField(max_length=200)
    old = models.JSONField(null=True, blank=True)
    new = models.JSONField(null=True, blank=True)
    apply = models.CharField(max_length=16, blank=True)

    class Meta:
        ordering = ["record", "id"]
        indexes = [models.Index(fields=["path", "record"], name="impact_field_path")]

    def __str__(self) -> str:
        return f"{self.path}: {self.old!r} -> {self.new!r}"
