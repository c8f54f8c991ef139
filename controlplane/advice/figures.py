"""A pool's recent figures as the suggestion rules read them: means over its 1 s pool rows of the last minutes.

One sample is noise (a burst of long prompts, one slow batch); the rules look at a window (`WINDOW_S`, ten minutes)
and say nothing about a figure with fewer than `MIN_SAMPLES` seconds that carry it (thin data: no suggestion).

`load` is worked out per second from the pool row the way degradation reads a node (operations/degradation.py): the
highest of KV-cache usage, SM activity (never NVML's GPU utilisation, which is near 1.0 whenever any kernel runs) and
each queue's depth over its limit (the limit times the nodes the row covers). Pool rows hold the mean KV-cache usage
and SM activity over the nodes, so this load is the pool's average, not its busiest node's.
"""

import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.utils import timezone

from controlplane.metrics.models import MetricSample

# Ten minutes covers several alert windows (10-60 s) and a canary stage, and is short enough to follow a change.
WINDOW_S = 600
# A minute of samples in the window: fewer says too little about a figure to act on.
MIN_SAMPLES = 60
MEANS = ("batch_idle_ratio", "long_request_share", "spec_rejection_rate", "latency_p99_s", "qps", "batch_size_mean")


@dataclass
class WindowFigures:
    """Means of the pool's figures over the window, how many seconds carried each, and the loaded seconds' P99."""

    pool: str
    since: datetime
    until: datetime
    means: dict[str, float | None] = field(default_factory=dict)
    samples: dict[str, int] = field(default_factory=dict)
    batch_size_hist: dict[int, float] = field(default_factory=dict)
    length_hist: dict[str, float] = field(default_factory=dict)
    loaded_seconds: int = 0
    loaded_p99_s: float | None = None
    load_mean: float | None = None

    def mean(self, metric: str) -> float | None:
        """The window mean of `metric`, or None when fewer than MIN_SAMPLES seconds carried it."""
        if self.samples.get(metric, 0) < MIN_SAMPLES:
            return None
        return self.means.get(metric)


def pool_window_figures(
    *, pool: str, params: dict, load_threshold: float, now: datetime | None = None, window_s: int = WINDOW_S
) -> WindowFigures:
    """The pool's window figures; `params` are the running version's (queue limits); seconds whose load is above
    `load_threshold` give `loaded_p99_s`."""
    until = now or timezone.now()
    since = until - timedelta(seconds=window_s)
    rows = MetricSample.objects.filter(
        scope=MetricSample.Scope.POOL,
        name=pool,
        resolution_s=MetricSample.Resolution.SECOND,
        t__gt=since,
        t__lte=until,
    ).values_list("values", flat=True)
    figures = WindowFigures(pool=pool, since=since, until=until)
    sums: dict[str, float] = dict.fromkeys(MEANS, 0.0)
    counts: dict[str, int] = dict.fromkeys(MEANS, 0)
    loaded_p99: list[float] = []
    loads: list[float] = []
    batch_sizes: dict = {}
    lengths: dict = {}
    for values in rows.iterator(chunk_size=2000):
        for metric in MEANS:
            value = _number(values.get(metric))
            if value is not None:
                sums[metric] += value
                counts[metric] += 1
        _add_counts(batch_sizes, values.get("batch_size_hist"))
        _add_counts(lengths, values.get("length_hist"))
        load = row_load(values, params)
        if load is not None:
            loads.append(load)
            p99 = _number(values.get("latency_p99_s"))
            if load > load_threshold and p99 is not None:
                loaded_p99.append(p99)
    figures.batch_size_hist = _counted(batch_sizes, key=_batch_size)
    figures.length_hist = _counted(lengths, key=str)
    figures.means = {m: (sums[m] / counts[m] if counts[m] else None) for m in MEANS}
    figures.samples = counts
    figures.loaded_seconds = len(loaded_p99)
    figures.loaded_p99_s = math.fsum(loaded_p99) / len(loaded_p99) if loaded_p99 else None
    figures.load_mean = math.fsum(loads) / len(loads) if loads else None
    figures.samples["load"] = len(loads)
    return figures


def row_load(values: dict, params: dict) -> float | None:
    """One pool row's load (see the module docstring), at most 1.0; None when the row carries none of its signals."""
    batch = params["batch"]
    nodes = max(1, int(_number(values.get("nodes")) or 1))
    signals = [
        _number(values.get("kv_cache_usage")),
        _number(values.get("sm_util")),
        _ratio(values.get("queue_depth_short"), batch["max_queue"] * nodes),
        _ratio(values.get("queue_depth_long"), batch["long_context_max_queue"] * nodes),
    ]
    present = [s for s in signals if s is not None]
    return min(max(present), 1.0) if present else None


def _ratio(depth, limit: int) -> float | None:
    depth = _number(depth)
    return None if depth is None or limit <= 0 else depth / limit


def _batch_size(bucket: str) -> int | None:
    # ASCII digits only, and few: str.isdigit() also says yes to "²" and to 5,000 nines, which int() refuses.
    return int(bucket) if bucket.isascii() and bucket.isdigit() and len(bucket) <= 5 and int(bucket) > 0 else None


def _add_counts(total: dict, counts) -> None:
    # Per row and bucket only the add (a row's maps hold up to 256 buckets); keys and sums are checked once, after.
    if isinstance(counts, dict):
        for bucket, n in counts.items():
            if type(n) is int or type(n) is float:
                total[bucket] = total.get(bucket, 0) + n


def _counted(total: dict, *, key) -> dict:
    counted = {}
    for bucket, n in total.items():
        k = key(str(bucket))
        if k is not None and math.isfinite(n) and n > 0:
            counted[k] = counted.get(k, 0) + n
    return counted


def _number(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)
