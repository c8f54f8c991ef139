"""Conversation logs (files on disk, immutable once stored) and their analyses against a pool's parameters."""

from pathlib import Path

from django.conf import settings
from django.db import models
from django.db.models import Q

from controlplane.lib.errors import Conflict


class ConversationLog(models.Model):
    """An uploaded or imported log of customer conversations, stored as a file under `CONVERSATION_LOG_DIR`.

    The file and its identity (name, format, size, sha256) never change; the counts are filled by its first analysis.
    """

    class Format(models.TextChoices):
        JSONL = "jsonl", "JSON Lines"
        CSV = "csv", "CSV"

    class Compression(models.TextChoices):
        NONE = "none", "none"
        GZIP = "gzip", "gzip"

    class Source(models.TextChoices):
        UPLOAD = "upload", "uploaded"
        IMPORT = "import", "imported from the control-plane host"

    name = models.SlugField(max_length=64, unique=True)
    description = models.CharField(max_length=500, blank=True)
    original_filename = models.CharField(max_length=255)
    source = models.CharField(max_length=8, choices=Source.choices, default=Source.UPLOAD)
    format = models.CharField(max_length=8, choices=Format.choices)
    compression = models.CharField(max_length=8, choices=Compression.choices, default=Compression.NONE)
    size_bytes = models.BigIntegerField()
    sha256 = models.CharField(max_length=64)
    # The file's name inside CONVERSATION_LOG_DIR: random, never derived from what a user sent.
    stored_name = models.CharField(max_length=80, unique=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    conversation_count = models.PositiveIntegerField(null=True, blank=True)
    message_count = models.PositiveIntegerField(null=True, blank=True)
    bad_line_count = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return self.name

    def save(self, *args, **kwargs):
        if self.pk is not None:
            raise Conflict("log: conversation logs are immutable; upload a new one")
        super().save(*args, **kwargs)

    @property
    def path(self) -> Path:
        return Path(settings.CONVERSATION_LOG_DIR) / self.stored_name


class LogAnalysis(models.Model):
    """One analysis of a log against a pool's active template version: progress while it runs, then its figures
    (`result`) and the suggestions drawn from them."""

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"

    class TokenSource(models.TextChoices):
        LOG = "log", "token counts from the log"
        ESTIMATED = "estimated", "estimated from the text"
        MIXED = "mixed", "partly from the log, partly estimated"

    log = models.ForeignKey(ConversationLog, on_delete=models.CASCADE, related_name="analyses")
    pool = models.ForeignKey("nodes.Pool", on_delete=models.PROTECT, related_name="+")
    version = models.ForeignKey("params.TemplateVersion", on_delete=models.PROTECT, related_name="+")
    intent_model = models.ForeignKey(
        "datasets.IntentModel", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    coverage = models.PositiveSmallIntegerField(default=90)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    progress = models.PositiveSmallIntegerField(default=0)
    progress_text = models.CharField(max_length=200, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    # When the running analysis last reported progress (each second or so): a worker that stopped leaves it stale.
    progress_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True)
    token_source = models.CharField(max_length=12, choices=TokenSource.choices, blank=True)
    # The parameters analysed against (cap, whitelists, thresholds), the figures, and the suggestions.
    params = models.JSONField(default=dict)
    result = models.JSONField(null=True, blank=True)
    suggestions = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(condition=Q(progress__lte=100), name="log_analysis_progress_at_most_100"),
            models.CheckConstraint(condition=Q(coverage__gte=50, coverage__lte=99), name="log_analysis_coverage_range"),
        ]

    def __str__(self) -> str:
        return f"{self.log.name} analysis {self.pk}"

    @property
    def is_finished(self) -> bool:
        return self.status in {self.Status.SUCCEEDED, self.Status.FAILED}
