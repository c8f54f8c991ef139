"""Metric history: node samples as the agents sent them, pool and fleet aggregates, at 1 s and 60 s resolution."""

from django.db import models


class MetricSample(models.Model):
    """One entity's figures at one time: a node's sample, or a pool's or the fleet's aggregate (`aggregation.py`)."""

    class Scope(models.TextChoices):
        NODE = "node"
        POOL = "pool"
        FLEET = "fleet"

    class Resolution(models.IntegerChoices):
        SECOND = 1
        MINUTE = 60

    FLEET_NAME = "fleet"

    scope = models.CharField(max_length=8, choices=Scope.choices)
    # The node's name, the pool's name, or "fleet".
    name = models.CharField(max_length=64)
    # The node's pool (a pool row repeats its own name); empty for the fleet.
    pool = models.CharField(max_length=64, blank=True)
    # Node rows: the agent's `t`; aggregate rows: the control plane's second; minute rows: the minute's start.
    t = models.DateTimeField()
    resolution_s = models.PositiveSmallIntegerField(choices=Resolution.choices)
    values = models.JSONField()

    class Meta:
        constraints = [
            # Also the index every history read uses (scope, name, resolution, time range); unique so aggregate
            # rows can be upserted once per second and a re-run rollup replaces its minute instead of adding one.
            models.UniqueConstraint(fields=["scope", "name", "resolution_s", "t"], name="metric_sample_entity_time"),
        ]
        indexes = [
            # Retention deletes and the rollup's minute scan cut across entities by time.
            models.Index(fields=["resolution_s", "t"], name="metric_sample_resolution_time"),
        ]

    def __str__(self) -> str:
        return f"{self.scope}:{self.name}@{self.t:%Y-%m-%d %H:%M:%S}/{self.resolution_s}s"
