"""Replay runs: a conversation log replayed against a non-production pool's gateways, request by request."""

from django.conf import settings
from django.db import models
from django.db.models import Q

from controlplane.lib.runs import CancellableRun, RunStatus
from controlplane.replays.figures import Ladder
from controlplane.replays.sustained import SLO_P99_S


class ReplayRun(CancellableRun, models.Model):
    """One replay of a conversation log (or a selection of it) through the gateways of a pool's nodes, open loop.

    The plan (which requests, when, to which node) is a pure function of the run's fields and the log, so each share
    of the load (a Celery task) rebuilds it and keeps its own part (`controlplane/replays/plan.py`).
    """

    class Selection(models.TextChoices):
        ALL = "all", "Every conversation"
        SAMPLE = "sample", "A random sample (n, seed)"
        TOP = "top", "The N most frequent first messages"

    class Pacing(models.TextChoices):
        QPS = "qps", "Target QPS"
        LOG_TIMES = "log_times", "The log's own arrival times, scaled"
        LADDER = "ladder", "Steps of increasing QPS (sustained QPS)"

    class Arrival(models.TextChoices):
        POISSON = "poisson"
        UNIFORM = "uniform"

    label = models.CharField(max_length=200, blank=True)
    pool = models.ForeignKey("nodes.Pool", on_delete=models.PROTECT, related_name="replay_runs")
    # Node names the run sends to; empty: every node of the pool that serves when the run starts. Names, not a
    # relation: the record outlives a node's registration.
    nodes = models.JSONField(default=list, blank=True)
    # The pool's desired version when the run started, and the hash its nodes report once they run it.
    template_version = models.ForeignKey(
        "params.TemplateVersion", null=True, blank=True, on_delete=models.PROTECT, related_name="replay_runs"
    )
    template_hash = models.CharField(max_length=64, blank=True)
    log = models.ForeignKey(
        "convlogs.ConversationLog", null=True, blank=True, on_delete=models.PROTECT, related_name="replay_runs"
    )
    # The log's name as well: the record outlives the log.
    log_name = models.CharField(max_length=200, blank=True)

    selection = models.CharField(max_length=8, choices=Selection.choices, default=Selection.ALL)
    sample_size = models.PositiveIntegerField(null=True, blank=True)
    sample_seed = models.BigIntegerField(null=True, blank=True)
    top_n = models.PositiveIntegerField(null=True, blank=True)

    pacing = models.CharField(max_length=16, choices=Pacing.choices, default=Pacing.QPS)
    qps = models.FloatField(null=True, blank=True)
    arrival = models.CharField(max_length=8, choices=Arrival.choices, default=Arrival.POISSON)
    # log_times: offsets from the log's first conversation multiplied by this (0.5 = twice as fast).
    time_scale = models.FloatField(null=True, blank=True)
    # log_times: the log has one start time per conversation; its later user turns follow at this spacing (scaled).
    turn_gap_s = models.FloatField(default=5.0)
    duration_cap_s = models.PositiveIntegerField()
    # ladder: the QPS of each step, lowest first, each `step_s` seconds long, back to back (duration: steps x step_s).
    qps_steps = models.JSONField(default=list, blank=True)
    step_s = models.PositiveIntegerField(null=True, blank=True)
    # ladder: the first-round P99 line each step is judged against (the report's 1.8 s unless the team's SLO differs).
    slo_p99_s = models.FloatField(null=True, blank=True)
    stream = models.BooleanField(default=True)
    # The nodes the run sends to, resolved when it starts: [{"name", "url", "model"}].
    targets = models.JSONField(default=list, blank=True)
    # Seeds the schedule (Poisson gaps): every share draws the same plan.
    seed = models.BigIntegerField(default=0)

    status = models.CharField(max_length=12, choices=RunStatus.choices, default=RunStatus.QUEUED, db_index=True)
    shares = models.PositiveSmallIntegerField(default=0)
    shares_finished = models.PositiveSmallIntegerField(default=0)
    planned = models.PositiveIntegerField(default=0)
    sent = models.PositiveIntegerField(default=0)
    done = models.PositiveIntegerField(default=0)
    errors = models.PositiveIntegerField(default=0)
    # Achieved vs asked: requests sent per second of the sending window, against the plan's own rate (the target
    # QPS for uniform arrivals, the drawn schedule's rate for Poisson or the log's times); P99 of successes so far.
    achieved_qps = models.FloatField(null=True, blank=True)
    asked_qps = models.FloatField(null=True, blank=True)
    # How late requests left against their due time (P99 of sent - scheduled): the generator keeping up.
    send_lag_p99_s = models.FloatField(null=True, blank=True)
    p99_s = models.FloatField(null=True, blank=True)
    # The generator's own CPU (its shares' event-loop threads), for the run and per request sent.
    generator_cpu_s = models.FloatField(default=0.0)
    # Epoch seconds at which the plan's offset 0 falls; every share counts from it.
    schedule_start = models.FloatField(null=True, blank=True)
    first_sent_at = models.FloatField(null=True, blank=True)
    last_sent_at = models.FloatField(null=True, blank=True)

    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    reason = models.TextField()
    # Only an SRE or admin may replay against a production pool, and only with a reason.
    production_override_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    production_override_reason = models.TextField(blank=True)
    cancelled_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    error = models.TextField(blank=True)
    # The per-run gateway key (revoked when the run ends).
    client_key = models.ForeignKey(
        "nodes.ClientKey", null=True, blank=True, on_delete=models.SET_NULL, related_name="replay_runs"
    )
    # The pool's stored metrics over the run's window (controlplane/replays/pool_metrics.py).
    pool_metrics = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(production_override_reason="") | Q(production_override_by__isnull=False),
                name="replay_override_has_actor",
            ),
        ]

    def __str__(self) -> str:
        return f"replay {self.pk} on {self.pool.name}" if self.pool_id else f"replay {self.pk}"

    @property
    def ladder(self) -> Ladder | None:
        """The steps a ladder run's figures are judged by (controlplane/replays/sustained.py); None otherwise."""
        if self.pacing != self.Pacing.LADDER or not self.qps_steps or not self.step_s:
            return None
        return Ladder(
            qps_steps=tuple(float(q) for q in self.qps_steps),
            step_s=float(self.step_s),
            p99_max_s=self.slo_p99_s if self.slo_p99_s is not None else SLO_P99_S,
        )

    @property
    def cpu_per_request_ms(self) -> float | None:
        return self.generator_cpu_s * 1000 / self.sent if self.sent else None


class ReplayRequest(models.Model):
    """One replayed request: when it was due and sent, where it went, what the gateway decided and what came back.

    Offsets are seconds from the run's schedule start. Written in batches by the run's shares.
    """

    run = models.ForeignKey(ReplayRun, on_delete=models.CASCADE, related_name="requests")
    seq = models.PositiveIntegerField()
    conversation_id = models.CharField(max_length=200)
    # Which user turn of the conversation (0: the first).
    turn = models.PositiveSmallIntegerField(default=0)
    # The gateway's decision, from its X-Policy-* headers (empty when the request never got one).
    intent = models.CharField(max_length=64, blank=True)
    intent_confidence = models.FloatField(null=True, blank=True)
    tier = models.CharField(max_length=16, blank=True)
    tier_rule = models.CharField(max_length=32, blank=True)
    node_name = models.CharField(max_length=64)
    scheduled_at = models.FloatField()
    sent_at = models.FloatField(null=True, blank=True)
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    ok = models.BooleanField(default=False)
    error = models.CharField(max_length=300, blank=True)
    e2e_s = models.FloatField(null=True, blank=True)
    ttft_s = models.FloatField(null=True, blank=True)
    # To the end of the first round, what the user waits for when the gateway streams a continuation behind it;
    # end-to-end for a request that was not continued or not streamed (engine_node/replay_load.py).
    first_round_s = models.FloatField(null=True, blank=True)
    reply_tokens = models.PositiveIntegerField(null=True, blank=True)
    prompt_tokens = models.PositiveIntegerField(null=True, blank=True)
    continuation_rounds = models.PositiveSmallIntegerField(null=True, blank=True)
    max_tokens = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["run", "seq"]
        constraints = [models.UniqueConstraint(fields=["run", "seq"], name="replay_request_one_per_seq")]
        indexes = [models.Index(fields=["run", "ok", "e2e_s"], name="replay_request_latency_idx")]

    def __str__(self) -> str:
        return f"{self.run_id}#{self.seq}"


# Comparisons live in their own module; importing them here registers them with the app.
from controlplane.replays.comparison_models import ReplayComparison, ReplayComparisonRun  # noqa: E402

__all__ = ["ReplayComparison", "ReplayComparisonRun", "ReplayRequest", "ReplayRun"]
