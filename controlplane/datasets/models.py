"""Intent datasets, models trained on them and their release to pools; warmup datasets and their pool assignments."""

import json

from django.conf import settings
from django.db import models
from django.db.models import Q

from controlplane.lib.errors import Conflict
from controlplane.params.models import ImmutableVersion


class IntentDataset(models.Model):
    """An uploaded set of labelled messages; immutable once created, so a model always names the data it saw."""

    class SourceFormat(models.TextChoices):
        CSV = "csv", "CSV"
        JSONL = "jsonl", "JSON Lines"

    name = models.SlugField(max_length=64, unique=True)
    description = models.CharField(max_length=500, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    source_format = models.CharField(max_length=8, choices=SourceFormat.choices)
    row_count = models.PositiveIntegerField()
    duplicates_removed = models.PositiveIntegerField(default=0)
    label_counts = models.JSONField()
    has_templates = models.BooleanField(default=False)
    # sha256 of `rows_json` exactly; `rows_json` is the canonical form: [[text, label, lang, template], ...].
    sha256 = models.CharField(max_length=64)
    rows_json = models.TextField()

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return self.name

    def save(self, *args, **kwargs):
        if self.pk is not None:
            raise Conflict("dataset: datasets are immutable; upload a new one")
        super().save(*args, **kwargs)

    @property
    def rows(self) -> list[list[str]]:
        return json.loads(self.rows_json)


class IntentModel(models.Model):
    """One training run on a dataset: its progress while it runs, then its held-out evaluation and model file."""

    class Status(models.TextChoices):
        QUEUED = "queued"
        TRAINING = "training"
        SUCCEEDED = "succeeded"
        FAILED = "failed"

    dataset = models.ForeignKey(IntentDataset, on_delete=models.PROTECT, related_name="intent_models")
    number = models.PositiveIntegerField()
    epochs = models.PositiveIntegerField()
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    progress = models.PositiveSmallIntegerField(default=0)
    progress_text = models.CharField(max_length=200, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True)
    # accuracy, per-label precision/recall/support, confusion (labels x labels), held-out size, split, timings.
    evaluation = models.JSONField(null=True, blank=True)
    accuracy = models.FloatField(null=True, blank=True)
    # The model file IntentClassifier loads, as compact JSON text (kept verbatim: its sha256 covers the body).
    document_text = models.TextField(blank=True)
    sha256 = models.CharField(max_length=64, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["dataset", "number"], name="intent_model_number_unique"),
            models.CheckConstraint(condition=Q(progress__lte=100), name="intent_model_progress_at_most_100"),
        ]

    def __str__(self) -> str:
        return f"{self.dataset.name} #{self.number}"

    @property
    def is_finished(self) -> bool:
        return self.status in {self.Status.SUCCEEDED, self.Status.FAILED}


class IntentModelRelease(models.Model):
    """A pool switching its gateway's intent model; `intent_model` null means back to the model built into the agent.

    Only the newest release of a pool is active; older ones stay as its history.
    """

    pool = models.ForeignKey("nodes.Pool", on_delete=models.CASCADE, related_name="intent_model_releases")
    intent_model = models.ForeignKey(
        IntentModel, null=True, blank=True, on_delete=models.PROTECT, related_name="releases"
    )
    published_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    published_at = models.DateTimeField(auto_now_add=True, db_index=True)
    reason = models.TextField()
    is_active = models.BooleanField(default=True)

    class Meta:
        ordering = ["-published_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["pool"], condition=Q(is_active=True), name="intent_model_release_one_active_per_pool"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.pool.name}: {self.intent_model or 'built-in model'}"


class WarmupDataset(models.Model):
    """A named set of messages engine nodes replay to warm up after a cold start; its content lives in its versions."""

    name = models.SlugField(max_length=64, unique=True)
    description = models.CharField(max_length=500, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    latest_number = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class WarmupDatasetVersion(ImmutableVersion):
    """One immutable revision of a warmup dataset: uploaded messages, or the top queries of a conversation log."""

    class Source(models.TextChoices):
        UPLOAD = "upload", "upload"
        CONVERSATION_LOG = "conversation_log", "conversation log"

    dataset = models.ForeignKey(WarmupDataset, on_delete=models.PROTECT, related_name="versions")
    source = models.CharField(max_length=16, choices=Source.choices)
    source_format = models.CharField(max_length=8)
    message_count = models.PositiveIntegerField()
    duplicates_removed = models.PositiveIntegerField(default=0)
    # label -> messages carrying it, every label plus "none"
    intent_counts = models.JSONField()
    # For a conversation log: rows, conversations, user messages, distinct queries, top_n, kept (conversation_logs.py).
    derived_from = models.JSONField(null=True, blank=True)
    # The canonical messages, [{"text", "intent"?, "business_tag"?, "count"?}, ...] as compact JSON with sorted keys;
    # `sha256` is of this text exactly, so an agent can check what it fetched.
    messages_json = models.TextField()
    sha256 = models.CharField(max_length=64)

    class Meta:
        ordering = ["dataset", "-number"]
        constraints = [
            models.UniqueConstraint(fields=["dataset", "number"], name="warmup_version_number_unique"),
            models.CheckConstraint(condition=Q(number__gte=1), name="warmup_version_number_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.dataset.name} v{self.number}"

    @property
    def messages(self) -> list[dict]:
        return json.loads(self.messages_json)


class PoolWarmup(models.Model):
    """A pool's warmup dataset version: what its nodes replay after a cold start. The newest one is active."""

    pool = models.ForeignKey("nodes.Pool", on_delete=models.CASCADE, related_name="warmups")
    version = models.ForeignKey(WarmupDatasetVersion, on_delete=models.PROTECT, related_name="assignments")
    assigned_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    assigned_at = models.DateTimeField(auto_now_add=True, db_index=True)
    reason = models.TextField()
    is_active = models.BooleanField(default=True)

    class Meta:
        ordering = ["-assigned_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["pool"], condition=Q(is_active=True), name="pool_warmup_one_active"),
        ]

    def __str__(self) -> str:
        return f"{self.pool.name}: {self.version}"
