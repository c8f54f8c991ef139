"""Trend detectors for the seed's two fault cases (典型故障处理指南), over the last minutes of each node's samples.

- `batch_timeout_drop`, case 1 (批量超时: "Batch timeout exceeded" 伴随吞吐量骤降). Timeouts alone are a busy
  engine, a throughput drop alone is traffic going down; together they are the fault. Timeouts: the gateway's
  batcher saw at least TIMEOUT_SHARE_MIN of the recent window's requests wait past their batch timeout
  (`batch_timeout_rate`, engine_node/admission.py), or vLLM's own queue (`requests_waiting`) held at least
  WAITING_MIN requests on average. The value is then the drop of the recent window's mean throughput against the
  baseline window's median (1 - recent / baseline), else 0; None while the baseline is too short or too quiet to
  compare. A collapse that outlasts half the baseline window becomes the new baseline and the alert resolves: by then
  it has paged, and the P99 and rejection figures carry on showing it.
- `gpu_memory_leak`, case 2 (显存泄漏: GPU-Util 持续下降，但显存占用缓慢上升). Not a threshold on either figure:
  least-squares lines through the window's points of GPU utilisation and GPU memory used. The value is the memory
  line's rise over the window (a share of GPU memory) when utilisation's line fell by at least UTIL_FALL_MIN over
  the same window and memory crept up: the line explains at least MEMORY_R2_MIN of its variance, and no single
  step between two points carries more than STEP_SHARE_MAX of the rise (one jump is an engine allocating its
  pool, not a leak); else 0. None while the points cover less than COVERAGE_MIN of the window.

Windows and the point spacing are settings (ALERT_TREND_POINT_S, ALERT_BATCH_TIMEOUT_WINDOW_S,
ALERT_BATCH_TIMEOUT_BASELINE_S, ALERT_LEAK_WINDOW_S); the evaluator keeps the points in `NodeTrendTrack` rows and
computes the values when a point is added (their only input), so they are as fresh as the newest point.
"""

import itertools
import math
import statistics
from datetime import datetime

from django.conf import settings

from controlplane.alerts import signals
from controlplane.alerts.models import NodeTrendTrack

# The order of a point's figures after its time.
FIELDS = ("qps", "batch_timeout_rate", "requests_waiting", "gpu_util", "gpu_memory_used")
DETECTED = frozenset({signals.BATCH_TIMEOUT_DROP.name, signals.GPU_MEMORY_LEAK.name})

# One request in twenty waiting past its batch timeout is no longer the odd straggler (the batcher's own
# partial batches at their deadline are not counted: engine_node/batching.py OVERDUE_TIMEOUTS).
TIMEOUT_SHARE_MIN = 0.05
# vLLM queues requests itself only when its KV cache or seats are full (the gateway bounds what it sends).
WAITING_MIN = 1.0
# Below this the baseline is too quiet for a drop to mean anything (a node between two requests).
BASELINE_QPS_MIN = 0.5
# Utilisation falling by 10 points over the window; memory's rise must be a steady line, not a step.
UTIL_FALL_MIN = 0.10
MEMORY_R2_MIN = 0.5
STEP_SHARE_MAX = 0.5
COVERAGE_MIN = 0.8


def _figure(values: dict, key: str) -> float | None:
    value = values.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def horizon_s() -> float:
    """How far back points are kept: the longest window, plus one point."""
    batch = settings.ALERT_BATCH_TIMEOUT_WINDOW_S + settings.ALERT_BATCH_TIMEOUT_BASELINE_S
    return max(batch, settings.ALERT_LEAK_WINDOW_S) + settings.ALERT_TREND_POINT_S


def trends_update(*, latest: dict[str, dict], now: datetime) -> dict[str, dict[str, float | None]]:
    """The detectors' values for every node with a fresh sample.

    A node whose last point is ALERT_TREND_POINT_S old or more gets a point from its sample, loses those past the
    horizon, and its values are computed again and stored with the points; for the others the stored values stand
    (their inputs have not changed). Most passes read only the small values column, not minutes of points.
    """
    t = now.timestamp()
    period = settings.ALERT_TREND_POINT_S
    stored = dict(
        (node, (at, values))
        for node, at, values in NodeTrendTrack.objects.filter(node__in=list(latest)).values_list(
            "node", "last_point_at", "values"
        )
    )
    result = {}
    due = []
    for name in latest:
        at, values = stored.get(name, (None, None))
        if at is None or t - at >= period or t < at:
            due.append(name)
        else:
            result[name] = values
    if not due:
        return result
    keep_after = t - horizon_s()
    tracks = {track.node: track for track in NodeTrendTrack.objects.filter(node__in=due)}
    created, changed = [], []
    for name in due:
        point = [t, *(_figure(latest[name], key) for key in FIELDS)]
        track = tracks.get(name)
        if track is None:
            track = NodeTrendTrack(node=name, points=[])
            created.append(track)
        else:
            changed.append(track)
        track.points = [p for p in track.points if keep_after < p[0] < t] + [point]
        track.last_point_at = t
        track.values = detect(track.points, now=now)
        result[name] = track.values
    if created:
        NodeTrendTrack.objects.bulk_create(created, ignore_conflicts=True)
    if changed:
        NodeTrendTrack.objects.bulk_update(changed, ["points", "last_point_at", "values"], batch_size=500)
    return result


def trends_read() -> dict[str, dict[str, float | None]]:
    """Every tracked node's detector values as the evaluator last computed them (the Prometheus exposition)."""
    return dict(NodeTrendTrack.objects.values_list("node", "values"))


def detect(points: list[list], *, now: datetime) -> dict[str, float | None]:
    t = now.timestamp()
    return {
        signals.BATCH_TIMEOUT_DROP.name: batch_timeout_drop(points, now=t),
        signals.GPU_MEMORY_LEAK.name: gpu_memory_leak(points, now=t),
    }


def _mean(values: list[float]) -> float:
    return math.fsum(values) / len(values)


def batch_timeout_drop(points: list[list], *, now: float) -> float | None:
    """Case 1's value (module docstring) from points [t, qps, timeout rate, waiting, ...]."""
    window, baseline_s = settings.ALERT_BATCH_TIMEOUT_WINDOW_S, settings.ALERT_BATCH_TIMEOUT_BASELINE_S
    split = now - window
    recent = [p for p in points if split < p[0] <= now and p[1] is not None]
    before = [p for p in points if split - baseline_s < p[0] <= split and p[1] is not None]
    if len(recent) < 2 or len(before) < 2 or before[-1][0] - before[0][0] < baseline_s / 2:
        return None
    baseline = statistics.median(p[1] for p in before)
    if baseline < BASELINE_QPS_MIN:
        return None
    timeouts = _mean([p[2] or 0.0 for p in recent]) >= TIMEOUT_SHARE_MIN
    backlog = _mean([p[3] or 0.0 for p in recent]) >= WAITING_MIN
    if not (timeouts or backlog):
        return 0.0
    return max(0.0, 1.0 - _mean([p[1] for p in recent]) / baseline)


def line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """(slope, r²) of the least-squares line through the points; r² is 0 for a flat line."""
    mx, my = _mean(xs), _mean(ys)
    sxx = math.fsum((x - mx) ** 2 for x in xs)
    syy = math.fsum((y - my) ** 2 for y in ys)
    sxy = math.fsum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    if sxx <= 0:
        return 0.0, 0.0
    slope = sxy / sxx
    return slope, (sxy * sxy / (sxx * syy) if syy > 0 else 0.0)


def gpu_memory_leak(points: list[list], *, now: float) -> float | None:
    """Case 2's value (module docstring) from points [t, ..., gpu_util, gpu_memory_used]."""
    window = settings.ALERT_LEAK_WINDOW_S
    inside = [p for p in points if now - window < p[0] <= now and p[4] is not None and p[5] is not None]
    if len(inside) < 3 or inside[-1][0] - inside[0][0] < COVERAGE_MIN * window:
        return None
    times = [p[0] for p in inside]
    util_slope, _ = line(times, [p[4] for p in inside])
    memory_slope, memory_r2 = line(times, [p[5] for p in inside])
    rise = memory_slope * window
    if util_slope * window > -UTIL_FALL_MIN or memory_r2 < MEMORY_R2_MIN or rise <= 0:
        return 0.0
    largest_step = max(abs(b[5] - a[5]) for a, b in itertools.pairwise(inside))
    return rise if largest_step <= STEP_SHARE_MAX * rise else 0.0
