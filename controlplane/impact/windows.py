"""The pool's 1 s aggregate samples in an impact record's windows, read from the metrics app's stored history."""

import math
from datetime import datetime

from controlplane.impact.conclusions import FIGURE_KEYS
from controlplane.metrics import selectors
from controlplane.metrics.models import MetricSample

COLUMNS = (*FIGURE_KEYS, "nodes")


def window_samples(*, pool_name: str, since: datetime, until: datetime) -> dict[str, list[float]]:
    """Per figure (and `nodes`), the non-null values of the pool's 1 s rows in [since, until), oldest first."""
    times, columns = selectors.history(
        scope=MetricSample.Scope.POOL,
        name=pool_name,
        metrics=list(COLUMNS),
        since=since,
        until=until,
        resolution_s=MetricSample.Resolution.SECOND,
    )
    keep = [i for i, t in enumerate(times) if t < until]
    return {key: [v for v in (number(columns[key][i]) for i in keep) if v is not None] for key in COLUMNS}


def number(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)
