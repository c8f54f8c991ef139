"""Tuning studies: a search over template fields, each candidate replayed on a non-production pool."""

from django.conf import settings
from django.db import models

from controlplane.lib.runs import CancellableRun, RunStatus


class TuningStudy(CancellableRun, models.Model):
    """A search over some template fields of a base version, scored by replays on one non-production pool.

    Our rows are the record; the optimiser (Optuna, in memory) is rebuilt from the finished trials whenever the
    study's task runs. The study never publishes to a production pool; its outcome is the best candidate as a saved,
    unpublished template version that a person may take into the normal publish flow.
    """

    class Sampler(models.TextChoices):
        TPE = "tpe", "TPE (Optuna's default, Bayesian)"
        GRID = "grid", "Plain grid (the baseline)"
        RANDOM = "random", "Random"

    label = models.CharField(max_length=200, blank=True)
    pool = models.ForeignKey("nodes.Pool", on_delete=models.PROTECT, related_name="tuning_studies")
    base_version = models.ForeignKey("params.TemplateVersion", on_delete=models.PROTECT, related_name="+")
    # What the pool ran before the study: it goes back to it when the study ends.
    pool_version_before = models.ForeignKey(
        "params.TemplateVersion", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    # [{"path", "type", "apply", "low", "high", "step"?, "log"?} | {"path", "type": "choice", "apply", "choices"}]
    space = models.JSONField()
    objective = models.CharField(max_length=16)
    # {"p99_max_s", "error_rate_max"}: from the SLO unless given.
    constraints = models.JSONField()
    sampler = models.CharField(max_length=8, choices=Sampler.choices, default=Sampler.TPE)
    seed = models.BigIntegerField(default=0)
    budget = models.PositiveSmallIntegerField()
    # The replay every trial runs: {"log", "selection", "sample_size", "sample_seed", "top_n", "arrival",
    # "duration_s", "qps"} and for max_qps "qps_ladder" (ascending).
    replay_spec = models.JSONField()
    log = models.ForeignKey("convlogs.ConversationLog", on_delete=models.PROTECT, related_name="+")

    status = models.CharField(max_length=12, choices=RunStatus.choices, default=RunStatus.QUEUED, db_index=True)
    trials_done = models.PositiveSmallIntegerField(default=0)
    best_trial = models.ForeignKey("TuningTrial", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    error = models.TextField(blank=True)
    reason = models.TextField()
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    cancelled_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    # The running study's last sign of life (written at least every few seconds while it runs): one silent for
    # TUNING_STALL_S lost its worker and is failed by the reaper (runner.tuning_studies_reap).
    progress_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"study {self.pk}" + (f" ({self.label})" if self.label else "")

    @property
    def cold_fields(self) -> list[str]:
        return [d["path"] for d in self.space if d.get("apply") == "cold"]


class TuningTrial(models.Model):
    """One candidate: its values, the template version saved for it, the replay(s) that scored it, the verdict."""

    class State(models.TextChoices):
        RUNNING = "running"
        COMPLETE = "complete"  # measured (feasible or not)
        FAILED = "failed"  # the candidate never got measured: invalid document, NACK, replay failed
        CANCELLED = "cancelled"

    study = models.ForeignKey(TuningStudy, on_delete=models.CASCADE, related_name="trials")
    number = models.PositiveSmallIntegerField()
    params = models.JSONField()
    version = models.ForeignKey(
        "params.TemplateVersion", null=True, blank=True, on_delete=models.PROTECT, related_name="tuning_trials"
    )
    # The run whose figures are the trial's (for a QPS ladder: the highest step that met the constraints, else the
    # first).
    replay_run = models.ForeignKey(
        "replays.ReplayRun", null=True, blank=True, on_delete=models.PROTECT, related_name="tuning_trials"
    )
    # Per replay: {"qps", "run", "p99_s", "error_rate", "output_tokens_per_s", "requests_per_s", "violations"}.
    steps = models.JSONField(default=list, blank=True)
    state = models.CharField(max_length=10, choices=State.choices, default=State.RUNNING)
    value = models.FloatField(null=True, blank=True)
    measured = models.JSONField(default=dict, blank=True)
    is_feasible = models.BooleanField(default=False)
    violations = models.JSONField(default=list, blank=True)
    error = models.TextField(blank=True)
    started_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["study", "number"]
        constraints = [models.UniqueConstraint(fields=["study", "number"], name="tuning_trial_one_per_number")]

    def __str__(self) -> str:
        return f"{self.study} trial {self.number}"
