"""The data of a parameter field's page chart: the field's value over time as a step line, against the pool's P99
and throughput from the metrics app's stored history."""

import json
from datetime import timedelta

from django.utils import timezone

from controlplane.impact.models import ImpactFieldChange
from controlplane.impact.windows import number
from controlplane.metrics import selectors as metrics
from controlplane.metrics.models import MetricSample


def _plotted(value):
    """A number as itself, a bool as 0/1, anything else (a list, a name) as its JSON text on a category axis."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int | float) or value is None:
        return value
    return json.dumps(value, ensure_ascii=False)


def field_chart(*, path: str, pool: str, changes: list[ImpactFieldChange]) -> dict:
    """{pool, steps: {x, y, text}, p99: {x, y}, qps: {x, y}, numeric, simulated, total} for one pool's changes of
    the field (oldest first); the step line starts at the first change's old value."""
    mine = [c for c in changes if c.record.pool_name == pool]
    now = timezone.now()
    steps = {"x": [], "y": [], "text": []}
    figures = {"p99": {"x": [], "y": []}, "qps": {"x": [], "y": []}}
    if mine:
        # Before the first change, its before-window: what the change moved from.
        start = mine[0].record.changed_at - timedelta(seconds=mine[0].record.window_before_s)
        if mine[0].old is not None:
            steps["x"].append(start.isoformat())
            steps["y"].append(_plotted(mine[0].old))
            steps["text"].append("before the first recorded change")
        for change in mine:
            steps["x"].append(change.record.changed_at.isoformat())
            steps["y"].append(_plotted(change.new))
            steps["text"].append(f"{change.record.kind} by {change.record.actor_name}: {change.record.reason[:80]}")
        steps["x"].append(now.isoformat())
        steps["y"].append(steps["y"][-1])
        steps["text"].append("now")
        resolution = metrics.history_resolution(since=start, until=now)
        times, columns = metrics.history(
            scope=MetricSample.Scope.POOL,
            name=pool,
            metrics=["latency_p99_s", "qps"],
            since=start,
            until=now,
            resolution_s=resolution,
        )
        x = [t.isoformat() for t in times]
        figures = {
            "p99": {"x": x, "y": [number(v) for v in columns["latency_p99_s"]]},
            "qps": {"x": x, "y": [number(v) for v in columns["qps"]]},
        }
    simulated, total = metrics.simulated_node_counts(pool=pool)
    numeric = all(isinstance(y, int | float) or y is None for y in steps["y"])
    return {
        "path": path,
        "pool": pool,
        "steps": steps,
        **figures,
        "numeric": numeric,
        "simulated": simulated,
        "total": total,
    }
