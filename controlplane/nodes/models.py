"""A pool of engine nodes runs one desired template version; every change of it is a release."""

from django.conf import settings
from django.db import models


class Pool(models.Model):
    """A named group of engine nodes (e.g. `staging`, `prod-main`) with one desired version."""

    name = models.SlugField(max_length=64, unique=True)
    description = models.CharField(max_length=500, blank=True)
    is_production = models.BooleanField(default=False)
    desired_version = models.ForeignKey(
        "params.TemplateVersion", null=True, blank=True, on_delete=models.PROTECT, related_name="desired_by"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-is_production", "name"]

    def __str__(self) -> str:
        return self.name


class PoolRelease(models.Model):
    """One change of a pool's desired version: a publish or a rollback, with who, why and what before."""

    class Kind(models.TextChoices):
        PUBLISH = "publish"
        ROLLBACK = "rollback"

    pool = models.ForeignKey(Pool, on_delete=models.CASCADE, related_name="releases")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    version = models.ForeignKey("params.TemplateVersion", on_delete=models.PROTECT, related_name="releases")
    previous_version = models.ForeignKey(
        "params.TemplateVersion", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    reason = models.TextField()
    # Set only when an SRE sent a version to production without a prior non-production release.
    override_reason = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.pool.name}: {self.kind} {self.version}"


class EngineNode(models.Model):
    """One GPU host's agent: its credential, what it reported last, and which config it runs."""

    class Status(models.TextChoices):
        STARTING = "starting"
        ONLINE = "online"
        DRAINING = "draining"
        RESTARTING = "restarting"
        DEGRADED = "degraded"
        LOST = "lost"

    name = models.SlugField(max_length=64, unique=True)
    pool = models.ForeignKey(Pool, on_delete=models.PROTECT, related_name="nodes")
    description = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # sha256 of the token; the token itself is shown once and never stored.
    token_hash = models.CharField(max_length=64, blank=True, db_index=True)
    token_prefix = models.CharField(max_length=12, blank=True)
    token_issued_at = models.DateTimeField(null=True, blank=True)
    token_revoked_at = models.DateTimeField(null=True, blank=True)

    hostname = models.CharField(max_length=255, blank=True)
    backend = models.CharField(max_length=32, blank=True)
    engine_version = models.CharField(max_length=64, blank=True)
    agent_version = models.CharField(max_length=32, blank=True)
    gpus = models.JSONField(default=list, blank=True)
    reported_status = models.CharField(max_length=16, choices=Status.choices, default=Status.STARTING)
    is_connected = models.BooleanField(default=False)
    # Which connection is the live one: a late disconnect of an older connection must not mark it lost.
    session_id = models.CharField(max_length=100, blank=True)
    connected_at = models.DateTimeField(null=True, blank=True)
    last_seen_at = models.DateTimeField(null=True, blank=True)
    log_tail = models.JSONField(default=list, blank=True)

    applied_version = models.ForeignKey(
        "params.TemplateVersion", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    applied_hash = models.CharField(max_length=64, blank=True)
    applied_at = models.DateTimeField(null=True, blank=True)
    last_nack_hash = models.CharField(max_length=64, blank=True)
    last_nack_error = models.TextField(blank=True)
    last_nack_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["pool__name", "name"]

    def __str__(self) -> str:
        return self.name

    def is_lost(self, now) -> bool:
        """No live connection, or no heartbeat for longer than the agreed timeout."""
        if not self.is_connected or self.last_seen_at is None:
            return True
        return (now - self.last_seen_at).total_seconds() > settings.NODE_LOST_AFTER_S

    def status(self, now) -> str:
        return self.Status.LOST if self.is_lost(now) else self.reported_status

    @property
    def has_token(self) -> bool:
        return bool(self.token_hash)


class NodeCommand(models.Model):
    """An operation a node carries out (restart engine, drain, resume, memory cleanup), and how it went.

    An SRE asks for most; an automatic memory cleanup is asked for by the node itself (no requester). Cleanups
    wait (`sent_at` empty) until their pool has no other cleanup under way: one node of a pool at a time.
    """

    class Op(models.TextChoices):
        RESTART = "restart", "Restart engine"
        DRAIN = "drain", "Drain"
        RESUME = "resume", "Resume"
        CLEANUP = "cleanup", "Clean up memory"

    class State(models.TextChoices):
        PENDING = "pending"
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"

    node = models.ForeignKey(EngineNode, on_delete=models.CASCADE, related_name="commands")
    op = models.CharField(max_length=16, choices=Op.choices)
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    progress = models.CharField(max_length=500, blank=True)
    result = models.TextField(blank=True)
    # Empty for a cleanup the node asked for itself (fragmentation threshold or timer).
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    reason = models.TextField()
    requested_at = models.DateTimeField(auto_now_add=True)
    # When the command went to the agent; a cleanup waits unsent while another node of its pool cleans up.
    sent_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-requested_at", "-id"]

    def __str__(self) -> str:
        return f"{self.op} on {self.node.name}"

    @property
    def is_finished(self) -> bool:
        return self.state in {self.State.SUCCEEDED, self.State.FAILED}

    @property
    def requester(self) -> str:
        return self.requested_by.get_username() if self.requested_by else "automatic"
