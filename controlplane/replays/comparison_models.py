"""A stored comparison of replay runs: which runs (the first is the baseline), who asked, and the computed result."""

from django.conf import settings
from django.db import models


class ReplayComparison(models.Model):
    """Two or more finished runs of the same traffic set side by side, computed once and kept (a permanent link).

    `result` is controlplane.replays.comparison.compare_runs's output; the runs are kept in order through
    ReplayComparisonRun so the baseline stays first.
    """

    label = models.CharField(max_length=200, blank=True)
    runs = models.ManyToManyField("replays.ReplayRun", through="replays.ReplayComparisonRun", related_name="+")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    # Runs of different logs compared anyway: who decided, and why (empty when the logs match).
    forced_reason = models.TextField(blank=True)
    seed = models.BigIntegerField()
    resamples = models.PositiveIntegerField()
    result = models.JSONField()

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"comparison {self.pk}" + (f" ({self.label})" if self.label else "")


class ReplayComparisonRun(models.Model):
    """One run of a comparison at its position (0: the baseline)."""

    comparison = models.ForeignKey(ReplayComparison, on_delete=models.CASCADE, related_name="members")
    run = models.ForeignKey("replays.ReplayRun", on_delete=models.PROTECT, related_name="comparison_members")
    position = models.PositiveSmallIntegerField()

    class Meta:
        ordering = ["comparison", "position"]
        constraints = [
            models.UniqueConstraint(fields=["comparison", "position"], name="replay_comparison_position_unique"),
            models.UniqueConstraint(fields=["comparison", "run"], name="replay_comparison_run_unique"),
        ]

    def __str__(self) -> str:
        return f"comparison {self.comparison_id} #{self.position}: run {self.run_id}"
