"""A pool of engine nodes runs one desired template version; every change of it is a release."""

from datetime import timedelta

from django.conf import settings
from django.db import models
from django.db.models import Q

# One node first, then a quarter of the pool, then all of it: a bad version reaches one node's users before anyone
# else's, and a quarter is still a minority if the first stage's window was too quiet to show the regression.
DEFAULT_CANARY_STAGES = ({"nodes": 1}, {"percent": 25}, {"percent": 100})


def default_canary_stages() -> list[dict]:
    return [dict(stage) for stage in DEFAULT_CANARY_STAGES]


# How long a node of a non-production pool must run a version, healthy, before the version counts as having run
# there (the production gate). Five minutes: five times the longest `for` of the default alert rules (60 s), so any
# default rule has fired long before the window ends, and ten of the seed's 30 s cold-start evaluation periods.
DEFAULT_SOAK_S = 300


class Pool(models.Model):
    """A named group of engine nodes (e.g. `staging`, `prod-main`) with one desired version."""

    name = models.SlugField(max_length=64, unique=True)
    description = models.CharField(max_length=500, blank=True)
    is_production = models.BooleanField(default=False)
    desired_version = models.ForeignKey(
        "params.TemplateVersion", null=True, blank=True, on_delete=models.PROTECT, related_name="desired_by"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    # How a publish reaches the nodes (services/rollouts.py): `[{"percent": 100}]` sends it to every node at once.
    canary_stages = models.JSONField(default=default_canary_stages)
    # How long each stage is watched after all its nodes ACKed before it may promote.
    analysis_window_s = models.PositiveIntegerField(default=60)
    # Non-production pools: how long one of their nodes must run a version healthy before production may get it.
    soak_s = models.PositiveIntegerField(default=DEFAULT_SOAK_S)

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
    # Empty for the control plane's own rollback of a canary that failed its analysis.
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    reason = models.TextField()
    # Set only when an SRE sent a version to production without a prior non-production release.
    override_reason = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    # The version of each whitelist the template version names, as of the release: a production pool's gateways use
    # these, so a whitelist edit reaches production only through a publish (controlplane/nodes/whitelist_pins.py).
    whitelist_versions = models.ManyToManyField("params.WhitelistVersion", blank=True, related_name="releases")

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.pool.name}: {self.kind} {self.version}"

    @property
    def actor_name(self) -> str:
        return self.actor.get_username() if self.actor else "system"


class Rollout(models.Model):
    """A publish going through the pool's canary stages: which nodes run the new version, and every analysis."""

    class State(models.TextChoices):
        RUNNING = "running"
        PAUSED = "paused"
        SUCCEEDED = "succeeded"
        ABORTED = "aborted"  # an SRE aborted it or rolled the pool back
        ROLLED_BACK = "rolled_back"  # its analysis failed and the control plane rolled the canary nodes back

    ACTIVE = (State.RUNNING, State.PAUSED)

    pool = models.ForeignKey(Pool, on_delete=models.CASCADE, related_name="rollouts")
    from_version = models.ForeignKey("params.TemplateVersion", on_delete=models.PROTECT, related_name="+")
    to_version = models.ForeignKey("params.TemplateVersion", on_delete=models.PROTECT, related_name="+")
    release = models.ForeignKey(PoolRelease, on_delete=models.CASCADE, related_name="rollouts")
    state = models.CharField(max_length=16, choices=State.choices, default=State.RUNNING)
    # The pool's stages when the publish happened; later edits of the pool apply to the next publish.
    stages = models.JSONField()
    stage_index = models.PositiveSmallIntegerField(default=0)
    stage_started_at = models.DateTimeField()
    # When every node of the stage had ACKed: its analysis window counts from here.
    stage_acked_at = models.DateTimeField(null=True, blank=True)
    # Node names added by each stage entered so far; the canary is their union, the baseline the rest of the pool.
    stage_nodes = models.JSONField(default=list)
    # Every analysis: canary and baseline figures, thresholds, verdict (pass | fail | hold).
    evidence = models.JSONField(default=list)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    outcome = models.TextField(blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["pool"], condition=Q(state__in=["running", "paused"]), name="rollout_one_active_per_pool"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.pool.name}: {self.from_version} → {self.to_version}"

    @property
    def is_active(self) -> bool:
        return self.state in self.ACTIVE

    @property
    def canary_nodes(self) -> list[str]:
        return [name for stage in self.stage_nodes for name in stage]


class EngineNode(models.Model):
    """One GPU host's agent: its credential, what it reported last, and which config it runs."""

    class Status(models.TextChoices):
        STARTING = "starting"
        ONLINE = "online"
        DRAINING = "draining"
        RESTARTING = "restarting"
        WARMING = "warming"  # replaying the pool's warmup dataset; no user traffic until it passes
        DEGRADED = "degraded"
        LOST = "lost"

    class WarmupState(models.TextChoices):
        IDLE = "idle"
        RUNNING = "running"
        PASSED = "passed"
        FAILED = "failed"
        SKIPPED = "skipped"  # no dataset assigned to the pool, or warmup.enabled off: the node serves unwarmed

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
    # Where clients reach the node's OpenAI gateway and the model name they must send, as the agent reports them.
    # Only an address the control plane may send to (controlplane/lib/gateway_addresses.py); a refused one is kept
    # out, and why is shown instead. `agent_address` is where the node's WebSocket came from, the default allowance.
    gateway_url = models.CharField(max_length=500, blank=True)
    gateway_url_refused = models.CharField(max_length=300, blank=True)
    agent_address = models.GenericIPAddressField(null=True, blank=True)
    served_model_name = models.CharField(max_length=255, blank=True)
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
    # Since when the node runs its applied config: a repeated ACK of the same config leaves it alone.
    applied_at = models.DateTimeField(null=True, blank=True)
    last_nack_hash = models.CharField(max_length=64, blank=True)
    last_nack_error = models.TextField(blank=True)
    last_nack_at = models.DateTimeField(null=True, blank=True)
    # The agent's last warmup run (engine_node/warmup.py): {state, trigger, done, total, p50, p99, concurrency, ...}.
    warmup_state = models.CharField(max_length=8, choices=WarmupState.choices, default=WarmupState.IDLE)
    warmup_progress = models.JSONField(default=dict, blank=True)
    warmup_finished_at = models.DateTimeField(null=True, blank=True)
    # Kept after a rollback's warmup passes, so the warmup-failed alert outlives the few seconds the state shows it.
    warmup_failed_at = models.DateTimeField(null=True, blank=True)
    # The agent's speculative-decoding rule (engine_node/speculation.py) as its heartbeat reports it: {state, ...}.
    speculation = models.JSONField(default=dict, blank=True)

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
    """An operation a node carries out (restart engine, drain, resume, memory cleanup, warmup), and how it went.

    An SRE asks for most; an automatic memory cleanup and the speculative-decoding rule's restarts are asked for
    by the node itself (no requester). Cleanups wait (`sent_at` empty) until their pool has no other cleanup under
    way: one node of a pool at a time.
    """

    # Ops only a node's own rule asks for; people cannot send them.
    SYSTEM_OPS = frozenset({"speculation_off", "speculation_on"})

    class Op(models.TextChoices):
        RESTART = "restart", "Restart engine"
        DRAIN = "drain", "Drain"
        RESUME = "resume", "Resume"
        CLEANUP = "cleanup", "Clean up memory"
        WARMUP = "warmup", "Warm up"
        # Asked for by the node itself (its speculative-decoding rule) and granted one node of a pool at a time.
        SPECULATION_OFF = "speculation_off", "Speculative decoding off"
        SPECULATION_ON = "speculation_on", "Speculative decoding on"

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


class VersionRun(models.Model):
    """A node of a non-production pool running one template version: the production gate's evidence.

    A run starts when the node ACKs the version (or is found healthy on it again after a break) and is watched
    (services/version_runs.py) while the node stays healthy on it; once that has held for the pool's `soak_s` it has
    *passed*, and the version counts as having run on non-production. A NACK is a run that ended at once.
    """

    class State(models.TextChoices):
        SOAKING = "soaking"  # running it, healthy so far, the window not over yet
        PASSED = "passed"  # ran it healthy for the whole window
        FAILED = "failed"  # stopped running it, or stopped being healthy, before the window was over
        NACKED = "nacked"  # refused it: `reason` is the node's error

    version = models.ForeignKey("params.TemplateVersion", on_delete=models.PROTECT, related_name="version_runs")
    pool = models.ForeignKey(Pool, on_delete=models.CASCADE, related_name="version_runs")
    # The node's name is kept as well: the evidence outlives the node's registration.
    node = models.ForeignKey(EngineNode, null=True, blank=True, on_delete=models.SET_NULL, related_name="version_runs")
    node_name = models.CharField(max_length=64)
    state = models.CharField(max_length=8, choices=State.choices, default=State.SOAKING)
    # The ACK (or NACK); for a run after a break, when the node was found healthy on the version again.
    started_at = models.DateTimeField()
    # The pool's soak_s when the run started; a later change of the pool applies to later runs.
    window_s = models.PositiveIntegerField()
    # The last check that found the node healthy on the version.
    healthy_until = models.DateTimeField()
    passed_at = models.DateTimeField(null=True, blank=True)
    # When the node stopped running the version or stopped being healthy; empty while it still runs it.
    ended_at = models.DateTimeField(null=True, blank=True)
    reason = models.TextField(blank=True)

    class Meta:
        ordering = ["-started_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["node", "version"], condition=Q(ended_at__isnull=True), name="version_run_one_open_per_node"
            ),
        ]
        indexes = [models.Index(fields=["version", "state"], name="version_run_version_state_idx")]

    def __str__(self) -> str:
        return f"{self.version} on {self.node_name} ({self.state})"

    @property
    def passes_at(self):
        return self.started_at + timedelta(seconds=self.window_s)


class ClientKey(models.Model):
    """A credential gateway clients send as `Authorization: Bearer`, valid on the nodes of its pools.

    Only its sha256 is stored (the key is shown once); its pools' nodes receive the hash in their policy bundle, so a
    revocation reaches them within seconds. A client key calls the /v1 routes and may send the business tags listed
    here (others are ignored by the gateway); a scrape key reads /metrics only.
    """

    class Kind(models.TextChoices):
        CLIENT = "client", "Client (/v1 routes)"
        SCRAPE = "scrape", "Scrape (/metrics)"

    name = models.SlugField(max_length=64)
    kind = models.CharField(max_length=8, choices=Kind.choices, default=Kind.CLIENT)
    pools = models.ManyToManyField(Pool, related_name="client_keys")
    business_tags = models.JSONField(default=list, blank=True)
    key_hash = models.CharField(max_length=64, unique=True)
    key_prefix = models.CharField(max_length=12)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoke_reason = models.TextField(blank=True)

    class Meta:
        ordering = ["name", "-created_at"]
        constraints = [
            # The name is the key's label in the nodes' metrics: one live key per name.
            models.UniqueConstraint(fields=["name"], condition=Q(revoked_at__isnull=True), name="client_key_live_name"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.key_prefix}…)"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None
