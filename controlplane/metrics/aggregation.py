"""How node samples combine into pool and fleet figures, and how 1 s rows roll up into 60 s rows.

Pool and fleet rows (`aggregate`) are computed over the latest sample of every node of the scope that was heard from
in the last few seconds (the ingestor drops older ones, so a lost node leaves the figures instead of freezing them):

- sum: `qps`, `requests_running`, `requests_waiting`, `queue_depth_short`, `queue_depth_long`, `engine_restarts`,
  `degraded` (so a pool's `degraded` is the number of its degraded nodes), `intent_classified`, and bucket by bucket
  the count maps `batch_size_hist`, `length_hist`, `intents`, `tiers`, `intent_confidence_hist`;
- max: the latency and time-to-first-token percentiles. Percentiles do not add up; without the raw requests the
  worst node's figure is the honest bound (the pool's true p99 is never above it), and it is what an SLO alert on
  "some users wait this long" needs;
- request-weighted mean (weight: the node's `qps`; an unweighted mean when every weight is 0): `error_rate`,
  `rejected_rate`, `long_request_share`, `batch_efficiency`, `batch_size_mean`, `spec_acceptance_rate`,
  `spec_rejection_rate`, `batch_timeout_rate`: shares of requests, so a busy node counts for more than an idle one;
- classified-weighted mean (weight: the node's `intent_classified`; left out where it is 0):
  `intent_below_floor_share`, the share of the scope's classified requests below their template's floor;
- mean over nodes (each GPU host counts once): `kv_cache_usage`, `batch_idle_ratio`, `fragmentation_ratio`,
  `gpu_util`, `sm_util`, `gpu_memory_used`: per-host resource gauges;
- plus `nodes`, how many nodes the row covers.

Null figures are left out of every rule; a figure that is null on every node stays null.

Minute rows (`roll_up`) cover the 1 s rows of one entity in one minute: every number is the mean over the rows that
have it (so a minute's `qps` is its average rate and its `latency_p99_s` the mean of the per-second p99s), except
`engine_restarts`, a counter since the agent started, which keeps its largest value, and `intent_below_floor_share`,
weighted by each row's `intent_classified` as above; count maps are summed bucket by bucket; `absent` (why figures
are null) is the last row's. Each 1 s row's counts cover the sample window (10 s), so summed buckets count a request
about `window_s` times: read them as shares (the dashboard does), or divide by `samples`, the number of 1 s rows in
the minute.
"""

import math
from collections.abc import Iterable

from controlplane.metrics.samples import ABSENT, COUNT_MAPS

SUMMED = ("qps", "requests_running", "requests_waiting")
SUMMED_COUNTS = ("queue_depth_short", "queue_depth_long", "engine_restarts", "degraded", "intent_classified")
WORST = ("latency_p50_s", "latency_p99_s", "latency_p999_s", "ttft_p50_s", "ttft_p99_s")
REQUEST_WEIGHTED = (
    "error_rate",
    "rejected_rate",
    "long_request_share",
    "batch_efficiency",
    "batch_size_mean",
    "spec_acceptance_rate",
    "spec_rejection_rate",
    "batch_timeout_rate",
)
# Shares of classified requests, weighted by how many each node (or 1 s row) classified.
CLASSIFIED_WEIGHTED = ("intent_below_floor_share",)
CLASSIFIED = "intent_classified"
PER_NODE_MEAN = ("kv_cache_usage", "batch_idle_ratio", "fragmentation_ratio", "gpu_util", "sm_util", "gpu_memory_used")
ROLLUP_LAST = ("engine_restarts",)


def aggregate(samples: list[dict]) -> dict:
    """Pool or fleet figures from the nodes' latest `m` dicts (see the module docstring for the rules)."""
    values: dict = {"nodes": len(samples)}
    for key in SUMMED:
        present = [s[key] for s in samples if s.get(key) is not None]
        values[key] = math.fsum(present) if present else None
    for key in SUMMED_COUNTS:
        values[key] = sum(s.get(key) or 0 for s in samples)
    for key in WORST:
        present = [s[key] for s in samples if s.get(key) is not None]
        values[key] = max(present) if present else None
    for key in REQUEST_WEIGHTED:
        pairs = [(s[key], s.get("qps") or 0.0) for s in samples if s.get(key) is not None]
        values[key] = _weighted_mean(pairs)
    for key in CLASSIFIED_WEIGHTED:
        values[key] = _classified_share(samples, key)
    for key in PER_NODE_MEAN:
        present = [s[key] for s in samples if s.get(key) is not None]
        values[key] = math.fsum(present) / len(present) if present else None
    for key in COUNT_MAPS:
        values[key] = _sum_maps(s.get(key) for s in samples)
    return values


def roll_up(rows: list[dict]) -> dict:
    """One minute row from the `values` of that minute's 1 s rows of one entity."""
    values: dict = {"samples": len(rows)}
    keys: list[str] = []
    for row in rows:
        keys.extend(k for k in row if k not in values and k not in keys)
    for key in keys:
        present = [row[key] for row in rows if row.get(key) is not None]
        if key == ABSENT:
            values[key] = rows[-1].get(ABSENT) or {}  # the reasons as of the minute's last sample
        elif key in COUNT_MAPS:
            values[key] = _sum_maps(present)
        elif key in CLASSIFIED_WEIGHTED:
            values[key] = _classified_share(rows, key)
        elif not present or not all(_is_number(v) for v in present):
            values[key] = None
        elif key in ROLLUP_LAST:
            values[key] = max(present)
        else:
            values[key] = math.fsum(present) / len(present)
    return values


def _weighted_mean(pairs: list[tuple[float, float]]) -> float | None:
    if not pairs:
        return None
    total_weight = math.fsum(w for _, w in pairs)
    if total_weight <= 0:
        return math.fsum(v for v, _ in pairs) / len(pairs)
    return math.fsum(v * w for v, w in pairs) / total_weight


def _classified_share(rows: list[dict], key: str) -> float | None:
    """The share over every classified request of the rows: each row's share weighted by its classified count."""
    pairs = [(row[key], row.get(CLASSIFIED)) for row in rows if _is_number(row.get(key))]
    pairs = [(share, n) for share, n in pairs if _is_number(n) and n > 0]
    total = math.fsum(n for _, n in pairs)
    return math.fsum(share * n for share, n in pairs) / total if total > 0 else None


def _sum_maps(maps: Iterable[dict | None]) -> dict:
    total: dict[str, float] = {}
    for counts in maps:
        for bucket, n in (counts or {}).items():
            total[bucket] = total.get(bucket, 0) + n
    return total


def _is_number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
