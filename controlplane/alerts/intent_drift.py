"""Intent drift: a pool's traffic moving to messages the gateway's intent classifier is unsure of.

New products and campaigns change how customers write; the classifier, trained on what was written before, then
answers more messages below the template's confidence floor, and those fall back to the normal tier whatever they ask
for. Each pass computes, for every pool, from its aggregate rows (controlplane/metrics/aggregation.py):

- `intent_drift_share`: the share of the pool's classified requests below the floor over the last
  ALERT_INTENT_DRIFT_WINDOW_S (each row's share weighted by its classified count). None, nothing to judge (the alert
  stays quiet), while the window holds fewer than ALERT_INTENT_DRIFT_MIN_REQUESTS classified requests: a handful of
  odd messages is not a drift.
- `intent_drift_rise`: that share minus the pool's baseline, the median of its rows' shares over the
  ALERT_INTENT_DRIFT_BASELINE_S before the window (the median, so that one earlier burst does not lift the baseline).
  None as above, and while the baseline holds fewer classified requests than the window needs or covers less than
  half of its range (a pool that just started has no "usual" yet: only the absolute line judges it).

Ranges of up to an hour read 1 s rows, longer ones the 60 s rows (metrics selectors' `history_resolution`); the
window is summed in the database (one row per pool), the baseline's rows are read for their median. A row's
`intent_classified` covers the agents' sample window (10 s), so rows count a request about window/resolution times:
the requests of a range are the sum of its rows' counts times resolution / sample_window_s().
"""

import math
import statistics
from datetime import datetime, timedelta

from django.conf import settings

from controlplane.alerts import signals
from controlplane.metrics import selectors as metrics
from controlplane.metrics.samples import sample_window_s

SIGNAL_NAMES = frozenset({signals.INTENT_DRIFT_SHARE.name, signals.INTENT_DRIFT_RISE.name})
BASELINE_COVERAGE_MIN = 0.5

Rows = list[tuple[float, float, float]]  # (unix t, classified, share below the floor)


def requests_in(rows: Rows, resolution_s: int) -> float:
    """How many classified requests the rows stand for (see the module docstring)."""
    return math.fsum(classified for _, classified, _ in rows) * resolution_s / sample_window_s()


def judge(
    window: tuple[float, float],
    baseline: Rows,
    *,
    window_resolution_s: int,
    baseline_resolution_s: int,
    baseline_s: float,
) -> dict[str, float | None]:
    """Both signals of one pool from its window's totals (sum of the rows' classified counts, and of their counts
    below the floor) and its baseline's rows."""
    min_requests = settings.ALERT_INTENT_DRIFT_MIN_REQUESTS
    result: dict[str, float | None] = {name: None for name in SIGNAL_NAMES}
    classified, below = window
    if classified * window_resolution_s / sample_window_s() < min_requests:
        return result
    share = below / classified
    result[signals.INTENT_DRIFT_SHARE.name] = share
    covered = len(baseline) >= 2 and baseline[-1][0] - baseline[0][0] >= BASELINE_COVERAGE_MIN * baseline_s
    if covered and requests_in(baseline, baseline_resolution_s) >= min_requests:
        result[signals.INTENT_DRIFT_RISE.name] = share - statistics.median(row[2] for row in baseline)
    return result


def drift_by_pool(*, now: datetime) -> dict[str, dict[str, float | None]]:
    """pool -> {signal: value} for every pool with classified requests in the window or the baseline."""
    window_s, baseline_s = settings.ALERT_INTENT_DRIFT_WINDOW_S, settings.ALERT_INTENT_DRIFT_BASELINE_S
    split = now - timedelta(seconds=window_s)
    start = split - timedelta(seconds=baseline_s)
    window_resolution = metrics.history_resolution(since=split, until=now, now=now)
    baseline_resolution = metrics.history_resolution(since=start, until=split, now=now)
    windows = metrics.pool_intent_totals(since=split, until=now, resolution_s=window_resolution)
    baselines = metrics.pool_intent_rows(since=start, until=split, resolution_s=baseline_resolution)
    return {
        pool: judge(
            windows.get(pool, (0.0, 0.0)),
            baselines.get(pool, []),
            window_resolution_s=window_resolution,
            baseline_resolution_s=baseline_resolution,
            baseline_s=baseline_s,
        )
        for pool in set(windows) | set(baselines)
    }
