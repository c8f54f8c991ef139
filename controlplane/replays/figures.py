"""A replay run's figures, computed from its request records alone (pure: no database, no clock).

Percentiles are **nearest-rank**: the P-th percentile of n values is the value of rank ceil(P/100 · n) in ascending
order (rank 1 when that is 0). Every percentile is therefore one request's own latency, named by its `seq`, and
"the requests above the P99" is an exact list. Latencies and reply lengths count successful requests only (a 429
answered in 2 ms is not a fast reply); error, 429 and 503 rates count every request.

A request record is a mapping with the ReplayRequest fields used here: `seq`, `intent`, `status_code`, `ok`,
`sent_at` (seconds from the run's start), `e2e_s`, `ttft_s`, `first_round_s`, `reply_tokens`, `continuation_rounds`.

`first_round_s` is what the user waits for: the end of the first round, the continuation (if any) streaming behind
it; it equals `e2e_s` for a request that was not continued.
"""

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from controlplane.replays import sustained

PERCENTILES = (("p50", 50.0), ("p95", 95.0), ("p99", 99.0), ("p999", 99.9))
REPLY_PERCENTILES = (("p50", 50.0), ("p95", 95.0))
INTENT_PERCENTILES = (("p50", 50.0), ("p99", 99.0), ("p999", 99.9))
NO_INTENT = "(none)"
DIGITS = 6


def nearest_rank(n: int, percentile: float) -> int:
    """The 1-based rank of the nearest-rank percentile among n sorted values."""
    if n <= 0:
        raise ValueError("no values")
    # The epsilon keeps 99.9 % of 1000 at rank 999 despite binary floating point (99.9 / 100 * 1000 = 999.0000001).
    return min(n, max(1, math.ceil(percentile / 100.0 * n - 1e-9)))


def percentile_of(sorted_values: Sequence[float], percentile: float) -> float | None:
    if not sorted_values:
        return None
    return sorted_values[nearest_rank(len(sorted_values), percentile) - 1]


def _ok(records: Iterable[Mapping]) -> list[Mapping]:
    return [r for r in records if r["ok"]]


def _ranked(records: Sequence[Mapping], key: str) -> list[tuple[float, int]]:
    """(value, seq) pairs of the records that have the value, ascending; ties by seq so ranks are stable."""
    return sorted((float(r[key]), int(r["seq"])) for r in records if r.get(key) is not None)


def _percentile_block(ranked: list[tuple[float, int]], percentiles) -> dict:
    """Each percentile's value and the seq of the request that holds it."""
    block: dict = {"count": len(ranked)}
    for name, percentile in percentiles:
        if ranked:
            value, seq = ranked[nearest_rank(len(ranked), percentile) - 1]
            block[name] = round(value, DIGITS)
            block[f"{name}_seq"] = seq
        else:
            block[name] = None
            block[f"{name}_seq"] = None
    return block


def run_window_s(records: Sequence[Mapping]) -> float:
    """From the first request sent to the last answer received (sent_at + e2e_s), in seconds."""
    sent = [float(r["sent_at"]) for r in records if r.get("sent_at") is not None]
    if not sent:
        return 0.0
    ends = [float(r["sent_at"]) + float(r.get("e2e_s") or 0.0) for r in records if r.get("sent_at") is not None]
    return max(ends) - min(sent)


@dataclass(frozen=True)
class Ladder:
    """A ladder run's steps (QPS lowest first, each `step_s` seconds of the schedule) and the first-round P99 line
    each step is judged against (the run's own SLO line; the report's 1.8 s when the run names none)."""

    qps_steps: tuple[float, ...]
    step_s: float
    p99_max_s: float = sustained.SLO_P99_S

    @property
    def constraints(self) -> sustained.Constraints:
        return sustained.Constraints(p99_max_s=self.p99_max_s, error_rate_max=sustained.DEFAULT_ERROR_RATE_MAX)


def run_figures(
    records: Sequence[Mapping], *, pool_metrics: Mapping | None = None, ladder: Ladder | None = None
) -> dict:
    """Every figure of one run (see the module docstring for the methods); a ladder run adds `ladder`."""
    total = len(records)
    ok = _ok(records)
    window = run_window_s(records)
    statuses = Counter(r.get("status_code") for r in records)
    output_tokens = sum(int(r.get("reply_tokens") or 0) for r in ok)
    reply = sorted(float(r["reply_tokens"]) for r in ok if r.get("reply_tokens") is not None)
    rounds = Counter(int(r.get("continuation_rounds") or 0) for r in ok)

    def rate(count: int) -> float | None:
        return round(count / total, DIGITS) if total else None

    return {
        "method": "nearest-rank percentiles over successful requests; rates over all requests",
        "requests": total,
        "ok": len(ok),
        "window_s": round(window, DIGITS),
        "latency": {
            "e2e_s": _percentile_block(_ranked(ok, "e2e_s"), PERCENTILES),
            "ttft_s": _percentile_block(_ranked(ok, "ttft_s"), PERCENTILES),
            "first_round_s": _percentile_block(_ranked(ok, "first_round_s"), PERCENTILES),
        },
        "throughput": {
            "requests_per_s": round(len(ok) / window, DIGITS) if window > 0 else None,
            "output_tokens_per_s": round(output_tokens / window, DIGITS) if window > 0 else None,
            "output_tokens": output_tokens,
        },
        "errors": {
            "error_rate": rate(total - len(ok)),
            "rate_429": rate(statuses.get(429, 0)),
            "rate_503": rate(statuses.get(503, 0)),
            "errors": total - len(ok),
            "count_429": statuses.get(429, 0),
            "count_503": statuses.get(503, 0),
        },
        "reply_tokens": {
            "count": len(reply),
            "mean": round(sum(reply) / len(reply), DIGITS) if reply else None,
            **{name: percentile_of(reply, p) for name, p in REPLY_PERCENTILES},
        },
        "continuation_rounds": {str(k): rounds[k] for k in sorted(rounds)},
        "intents": intent_figures(ok),
        "pool_metrics": pool_metrics_summary(pool_metrics),
        **({"ladder": ladder_figures(records, ladder)} if ladder is not None else {}),
    }


def step_figures(records: Sequence[Mapping]) -> dict:
    """One ladder step's judged figures: first-round P99 of its successes (and its request), its error rate."""
    ok = _ok(records)
    block = _percentile_block(_ranked(ok, sustained.SLO_LATENCY), (("p99", 99.0),))
    errors = len(records) - len(ok)
    return {
        "requests": len(records),
        "ok": len(ok),
        "p99_s": block["p99"],
        "p99_seq": block["p99_seq"],
        "error_rate": round(errors / len(records), DIGITS) if records else None,
    }


def ladder_figures(records: Sequence[Mapping], ladder: Ladder) -> dict:
    """Each step's figures and verdict against the ladder's SLO line, and the sustained QPS (0 when the first step
    missed it)."""
    constraints = ladder.constraints
    parts = sustained.split_steps(records, steps=len(ladder.qps_steps), step_s=ladder.step_s)
    steps = []
    for qps, part in zip(ladder.qps_steps, parts, strict=True):
        values = step_figures(part)
        steps.append({"qps": qps, **values, "violations": sustained.violations(values, constraints)})
    best = sustained.ladder_value(steps)
    return {
        "latency": sustained.SLO_LATENCY,
        "p99_max_s": constraints.p99_max_s,
        "error_rate_max": constraints.error_rate_max,
        "step_s": ladder.step_s,
        "steps": steps,
        "sustained_qps": best if best is not None else 0.0,
    }


def intent_figures(ok_records: Sequence[Mapping]) -> dict:
    """Per intent: count and nearest-rank P50/P99/P999 of end-to-end latency, slowest P99 first."""
    groups: dict[str, list[Mapping]] = {}
    for record in ok_records:
        groups.setdefault(record.get("intent") or NO_INTENT, []).append(record)
    blocks = {name: _percentile_block(_ranked(rows, "e2e_s"), INTENT_PERCENTILES) for name, rows in groups.items()}
    order = sorted(blocks, key=lambda name: (-(blocks[name]["p99"] or 0.0), name))
    return {name: blocks[name] for name in order}


def _numbers(stats: Mapping) -> dict:
    return {
        k: round(float(v), DIGITS) for k, v in stats.items() if isinstance(v, int | float) and not isinstance(v, bool)
    }


def pool_metrics_summary(pool_metrics: Mapping | None) -> dict:
    """The pool's own figures over the run window as the replay recorded them (controlplane/replays/pool_metrics.py):
    each figure's mean and max (KV cache, batch efficiency, speculative acceptance, GPU utilisation, ...), the node
    counts (simulated ones too) and the window; numbers only, besides the window's bounds and a label."""
    if not pool_metrics:
        return {}
    summary: dict = {}
    for key, value in pool_metrics.items():
        if isinstance(value, bool):
            continue
        if isinstance(value, int | float):
            summary[key] = round(float(value), DIGITS)
        elif isinstance(value, str) and key in ("label", "since", "until"):
            summary[key] = value
        elif key == "figures" and isinstance(value, Mapping):
            for name, stats in value.items():
                numbers = _numbers(stats) if isinstance(stats, Mapping) else {}
                numbers.pop("samples", None)
                if any(v is not None for v in numbers.values()) and numbers:
                    summary[name] = numbers
        elif isinstance(value, Mapping) and (numbers := _numbers(value)):
            summary[key] = numbers
    return summary


def latency_cdf(records: Sequence[Mapping], *, points: int = 200) -> dict:
    """End-to-end latency CDF of the successful requests, thinned to at most `points` steps for a chart."""
    values = sorted(float(r["e2e_s"]) for r in records if r["ok"] and r.get("e2e_s") is not None)
    n = len(values)
    if not n:
        return {"x": [], "y": []}
    step = max(1, n // points)
    ranks = sorted(set(range(step, n + 1, step)) | {1, n})
    return {"x": [round(values[r - 1], DIGITS) for r in ranks], "y": [round(r / n, DIGITS) for r in ranks]}
