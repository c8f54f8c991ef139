"""Whether the difference of a figure between two runs is beyond run-to-run noise: a seeded percentile bootstrap
over requests, and the spread of repeat runs of the same version where there are some.

Each run is resampled on its own (n requests drawn with replacement), the figure recomputed on both resamples and
their difference kept; 1,000 such differences give the 95 % interval (their nearest-rank 2.5th and 97.5th
percentiles). A difference is *beyond noise* when that interval excludes zero and the difference is larger than
the spread (max - min) of the figure across repeat runs of either version.

Resampling 100,000 requests a thousand times in Python would take minutes, so each resample's figure is drawn
directly from its exact sampling distribution instead of from n drawn requests:

- a nearest-rank percentile of rank k among n sorted values: the resample's k-th smallest value is the original's
  value of rank ceil(n·U), U ~ Beta(k, n - k + 1) (the k-th order statistic of n uniforms); exact.
- a rate (errors, 429s, 503s, completed requests per second): the resample's count is Binomial(n, count/n), drawn
  exactly by geometric waiting times while n·p·(1-p) < 25, else from its normal limit.
- a mean (reply length, output tokens per second): by literal resampling up to 2,000 requests, above that from its
  normal limit N(mean, s²/n), which the resample mean of that many requests follows to within plotting accuracy.

Per-intent figures are resampled within the intent (its request count held fixed).

A ladder run's sustained QPS is resampled step by step: each step's first-round P99 drawn as above and its error
count as a rate (the step's request count held fixed), the SLO applied to the draws, and the sustained step taken.
"""

import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from controlplane.replays import sustained
from controlplane.replays.figures import (
    INTENT_PERCENTILES,
    PERCENTILES,
    REPLY_PERCENTILES,
    Ladder,
    nearest_rank,
    run_window_s,
)

RESAMPLES = 1000
CONFIDENCE = 0.95
DEFAULT_SEED = 20261201
LITERAL_MEAN_MAX = 2000
EXACT_BINOMIAL_VARIANCE = 25.0

Sampler = Callable[[random.Random], float | None]


@dataclass(frozen=True)
class Figure:
    """One scalar figure: where it sits in run_figures' output, its unit, and which direction is better."""

    key: str
    label: str
    unit: str
    better: str  # "lower", "higher" or "neither"

    def value(self, figures: Mapping) -> float | None:
        node = figures
        for part in _path(self.key):
            if not isinstance(node, Mapping) or part not in node:
                return None
            node = node[part]
        return node if isinstance(node, int | float) and not isinstance(node, bool) else None


def _path(key: str) -> list[str]:
    if key.startswith("intents."):
        intent, _, stat = key[len("intents.") :].rpartition(".")
        return ["intents", intent, stat]
    return key.split(".")


LATENCIES = (
    ("e2e_s", "end-to-end latency"),
    ("ttft_s", "time to first token"),
    ("first_round_s", "first-round latency"),
)


def base_figures() -> list[Figure]:
    figures = []
    for metric, label in LATENCIES:
        for name, percentile in PERCENTILES:
            figures.append(Figure(f"latency.{metric}.{name}", f"{label} P{percentile:g}", "s", "lower"))
    figures += [
        Figure("throughput.requests_per_s", "completed requests per second", "req/s", "higher"),
        Figure("throughput.output_tokens_per_s", "output tokens per second", "tok/s", "higher"),
        Figure("errors.error_rate", "error rate", "ratio", "lower"),
        Figure("errors.rate_429", "429 rate", "ratio", "lower"),
        Figure("errors.rate_503", "503 rate", "ratio", "lower"),
        Figure("reply_tokens.mean", "reply length mean", "tokens", "neither"),
    ]
    figures += [
        Figure(f"reply_tokens.{name}", f"reply length P{p:g}", "tokens", "neither") for name, p in REPLY_PERCENTILES
    ]
    return figures


def ladder_figures() -> list[Figure]:
    return [Figure("ladder.sustained_qps", "sustained QPS (first-round P99 within the SLO)", "QPS", "higher")]


def intent_figures(intents: Sequence[str]) -> list[Figure]:
    return [
        Figure(f"intents.{intent}.{name}", f"{intent}: end-to-end P{p:g}", "s", "lower")
        for intent in intents
        for name, p in INTENT_PERCENTILES
    ]


# --- samplers: one draw of a figure's bootstrap distribution ---------------------------------------------------


def quantile_sampler(values: Sequence[float], percentile: float) -> Sampler:
    ordered = sorted(values)
    n = len(ordered)
    if not n:
        return lambda rng: None
    k = nearest_rank(n, percentile)

    def draw(rng: random.Random) -> float:
        u = rng.betavariate(k, n - k + 1)
        return ordered[min(n, max(1, math.ceil(n * u))) - 1]

    return draw


def binomial(rng: random.Random, n: int, p: float) -> int:
    """One Binomial(n, p) draw: exact (geometric waiting times on the rarer outcome) while n·p·(1-p) < 25."""
    if n <= 0 or p <= 0.0:
        return 0
    if p >= 1.0:
        return n
    variance = n * p * (1.0 - p)
    if variance >= EXACT_BINOMIAL_VARIANCE:
        return min(n, max(0, round(rng.gauss(n * p, math.sqrt(variance)))))
    rare = min(p, 1.0 - p)
    log_miss = math.log1p(-rare)
    hits, position = 0, 0
    while True:
        position += int(math.log(1.0 - rng.random()) / log_miss) + 1
        if position > n:
            break
        hits += 1
    return hits if rare == p else n - hits


def rate_sampler(count: int, n: int, *, scale: float = 1.0) -> Sampler:
    """count/n (times `scale`) of a resample; `scale` = n / window turns a share into a rate per second."""
    if n <= 0:
        return lambda rng: None
    p = count / n
    return lambda rng: binomial(rng, n, p) / n * scale


def mean_sampler(values: Sequence[float], *, scale: float = 1.0) -> Sampler:
    n = len(values)
    if not n:
        return lambda rng: None
    data = [float(v) for v in values]
    mean = sum(data) / n
    if n <= LITERAL_MEAN_MAX:
        return lambda rng: sum(rng.choices(data, k=n)) / n * scale
    spread = math.sqrt(sum((v - mean) ** 2 for v in data) / (n - 1) / n)
    return lambda rng: rng.gauss(mean, spread) * scale


def ladder_sampler(records: Sequence[Mapping], ladder: Ladder | None) -> Sampler:
    """The sustained QPS of one resample of a ladder run (None for a run without a ladder)."""
    if ladder is None:
        return lambda rng: None
    parts = sustained.split_steps(records, steps=len(ladder.qps_steps), step_s=ladder.step_s)
    steps = []
    constraints = ladder.constraints
    for qps, part in zip(ladder.qps_steps, parts, strict=True):
        column = sustained.SLO_LATENCY
        latencies = [float(r[column]) for r in part if r["ok"] and r.get(column) is not None]
        errors = sum(1 for r in part if not r["ok"])
        steps.append((qps, quantile_sampler(latencies, 99.0), rate_sampler(errors, len(part))))

    def draw(rng: random.Random) -> float:
        judged = []
        for qps, p99, error_rate in steps:
            values = {"p99_s": p99(rng), "error_rate": error_rate(rng)}
            judged.append({"qps": qps, "violations": sustained.violations(values, constraints)})
        best = sustained.ladder_value(judged)
        return best if best is not None else 0.0

    return draw


def samplers(
    records: Sequence[Mapping], figures: Sequence[Figure], *, ladder: Ladder | None = None
) -> dict[str, Sampler]:
    """A bootstrap sampler per figure key, for one run's request records (and its ladder, for a ladder run)."""
    ok = [r for r in records if r["ok"]]
    n = len(records)
    window = run_window_s(records)
    per_s = n / window if window > 0 else None
    by_intent: dict[str, list[float]] = {}
    for r in ok:
        if r.get("e2e_s") is not None:
            by_intent.setdefault(r.get("intent") or "(none)", []).append(float(r["e2e_s"]))
    columns = {
        metric: [float(r[metric]) for r in ok if r.get(metric) is not None]
        for metric in (*(name for name, _ in LATENCIES), "reply_tokens")
    }
    statuses = [r.get("status_code") for r in records]
    result: dict[str, Sampler] = {}
    percentile_of = dict(PERCENTILES) | dict(REPLY_PERCENTILES) | dict(INTENT_PERCENTILES)
    for figure in figures:
        parts = _path(figure.key)
        if parts[0] == "latency":
            result[figure.key] = quantile_sampler(columns[parts[1]], percentile_of[parts[2]])
        elif parts[0] == "intents":
            result[figure.key] = quantile_sampler(by_intent.get(parts[1], []), percentile_of[parts[2]])
        elif figure.key == "reply_tokens.mean":
            result[figure.key] = mean_sampler(columns["reply_tokens"])
        elif parts[0] == "reply_tokens":
            result[figure.key] = quantile_sampler(columns["reply_tokens"], percentile_of[parts[1]])
        elif figure.key == "throughput.requests_per_s":
            result[figure.key] = rate_sampler(len(ok), n, scale=per_s) if per_s else (lambda rng: None)
        elif figure.key == "throughput.output_tokens_per_s":
            tokens = [float(r.get("reply_tokens") or 0) if r["ok"] else 0.0 for r in records]
            result[figure.key] = mean_sampler(tokens, scale=per_s) if per_s else (lambda rng: None)
        elif figure.key == "errors.error_rate":
            result[figure.key] = rate_sampler(n - len(ok), n)
        elif figure.key in ("errors.rate_429", "errors.rate_503"):
            result[figure.key] = rate_sampler(statuses.count(int(figure.key[-3:])), n)
        elif figure.key == "ladder.sustained_qps":
            result[figure.key] = ladder_sampler(records, ladder)
    return result


# --- the difference of two runs --------------------------------------------------------------------------------


def difference_interval(
    base: Sampler, other: Sampler, *, seed: str, resamples: int = RESAMPLES
) -> tuple[float, float] | None:
    """The percentile-bootstrap interval of (other - base); None when either side has no value."""
    rng = random.Random(seed)
    diffs = []
    for _ in range(resamples):
        a, b = base(rng), other(rng)
        if a is None or b is None:
            return None
        diffs.append(b - a)
    diffs.sort()
    tail = (1.0 - CONFIDENCE) / 2 * 100
    return diffs[nearest_rank(resamples, tail) - 1], diffs[nearest_rank(resamples, 100 - tail) - 1]


def repeat_spread(values: Sequence[float | None]) -> float | None:
    """max - min of a figure over repeat runs of one version; None with fewer than two values."""
    present = [v for v in values if v is not None]
    return max(present) - min(present) if len(present) >= 2 else None


def compare_figure(
    figure: Figure,
    base_value: float | None,
    other_value: float | None,
    interval: tuple[float, float] | None,
    spreads: Sequence[float | None] = (),
) -> dict:
    """One figure's difference (other - base), relative difference, interval and verdict."""
    if base_value is None or other_value is None:
        return {"diff": None, "relative": None, "ci": None, "spread": None, "beyond_noise": None, "direction": None}
    diff = other_value - base_value
    relative = diff / base_value if base_value else None
    spread = max((s for s in spreads if s is not None), default=None)
    outside = interval is not None and (interval[0] > 0 or interval[1] < 0)
    beyond = bool(outside and (spread is None or abs(diff) > spread))
    direction = "same"
    if diff and figure.better != "neither":
        direction = "better" if (diff < 0) == (figure.better == "lower") else "worse"
    elif diff:
        direction = "higher" if diff > 0 else "lower"
    return {
        "diff": round(diff, 6),
        "relative": round(relative, 6) if relative is not None else None,
        "ci": [round(interval[0], 6), round(interval[1], 6)] if interval else None,
        "spread": round(spread, 6) if spread is not None else None,
        "beyond_noise": beyond,
        "direction": direction,
    }
