"""What a pool's figures before and after a change say about it: load similarity, data sufficiency, a verdict per
figure beyond noise, and one overall outcome led by P99 and throughput.

Noise: a two-sided Mann-Whitney U test over the 1 s pool samples of both windows (normal approximation with the tie
correction; pure Python, no numpy in the control plane). Each 1 s sample summarises the agent's last
`sample_window_s()` seconds of requests (METRICS_SAMPLE_WINDOW_S), so neighbouring samples share most of their
requests; the z statistic is divided by the square root of that window, which is the z the test would give on one
independent sample per window. A figure moved when that corrected p is below `ALPHA` *and* the medians differ by more
than the figure's smallest effect (5 % for latencies and throughput, one or two points for shares), so a tiny but
steady shift is "no change".
"""

import math
from dataclasses import dataclass

from controlplane.metrics.samples import sample_window_s

ALPHA = 0.05


@dataclass(frozen=True)
class Figure:
    """One pool figure an impact record compares: its sample key, label, which way is better and its smallest
    effect (relative to the before median when `relative`, else in the figure's own units)."""

    key: str
    label: str
    better: str  # "lower", "higher" or "neither"
    min_effect: float
    relative: bool


FIGURES = (
    Figure("latency_p50_s", "P50 latency", "lower", 0.05, True),
    Figure("latency_p99_s", "P99 latency", "lower", 0.05, True),
    Figure("latency_p999_s", "P99.9 latency", "lower", 0.05, True),
    Figure("qps", "throughput (QPS)", "higher", 0.05, True),
    Figure("error_rate", "error rate", "lower", 0.01, False),
    Figure("kv_cache_usage", "KV cache usage", "neither", 0.02, False),
    Figure("batch_efficiency", "batch efficiency", "higher", 0.02, False),
    Figure("batch_idle_ratio", "batch idle rate", "lower", 0.02, False),
    Figure("spec_acceptance_rate", "speculative acceptance", "higher", 0.02, False),
    Figure("long_request_share", "share of > 1k-token requests", "neither", 0.02, False),
    Figure("fragmentation_ratio", "fragmentation", "lower", 0.02, False),
)
FIGURE_KEYS = tuple(f.key for f in FIGURES)
LEADS = ("latency_p99_s", "qps")
LABELS = {f.key: f.label for f in FIGURES}


def summary(values: list[float]) -> dict:
    """{median, mean, p90, samples} of one figure's values in a window (None figures when there are none)."""
    if not values:
        return {"median": None, "mean": None, "p90": None, "samples": 0}
    ordered = sorted(values)
    return {
        "median": _median(ordered),
        "mean": math.fsum(ordered) / len(ordered),
        "p90": ordered[max(0, math.ceil(0.9 * len(ordered)) - 1)],
        "samples": len(ordered),
    }


def mann_whitney_p(before: list[float], after: list[float], *, dependence: float | None = None) -> float:
    """Two-sided p of "both windows come from the same distribution", z divided by sqrt(dependence) (by default the
    samples' window: neighbouring 1 s samples share that many seconds of requests)."""
    dependence = sample_window_s() if dependence is None else dependence
    n1, n2 = len(before), len(after)
    if n1 == 0 or n2 == 0:
        return 1.0
    pooled = sorted([(v, 0) for v in before] + [(v, 1) for v in after])
    rank_sum_before, tie_term, i = 0.0, 0.0, 0
    while i < len(pooled):
        j = i
        while j + 1 < len(pooled) and pooled[j + 1][0] == pooled[i][0]:
            j += 1
        rank = (i + j) / 2 + 1  # the mean rank of the tied run i..j
        ties = j - i + 1
        tie_term += ties**3 - ties
        rank_sum_before += rank * sum(1 for k in range(i, j + 1) if pooled[k][1] == 0)
        i = j + 1
    u = rank_sum_before - n1 * (n1 + 1) / 2
    n = n1 + n2
    variance = n1 * n2 / 12 * ((n + 1) - tie_term / (n * (n - 1))) if n > 1 else 0.0
    if variance <= 0:
        return 1.0  # every value equal: nothing moved
    z = (u - n1 * n2 / 2) / math.sqrt(variance) / math.sqrt(max(dependence, 1.0))
    return math.erfc(abs(z) / math.sqrt(2))


def figure_verdict(figure: Figure, before: list[float], after: list[float]) -> dict:
    """{verdict, change, relative_change, p_value, better}: improved / worsened / changed (a figure with no better
    direction) / no_change beyond noise, or unknown when either window has no values."""
    out = {"verdict": "unknown", "change": None, "relative_change": None, "p_value": None, "better": figure.better}
    if not before or not after:
        return out
    median_before, median_after = _median(sorted(before)), _median(sorted(after))
    change = median_after - median_before
    relative = change / median_before if median_before else None
    p = mann_whitney_p(before, after)
    out.update(change=change, relative_change=relative, p_value=p)
    effect = abs(relative) if figure.relative and relative is not None else abs(change)
    if figure.relative and relative is None:
        effect = math.inf if change else 0.0  # from zero to something is as large as an effect gets
    if p >= ALPHA or effect < figure.min_effect:
        out["verdict"] = "no_change"
    elif figure.better == "neither":
        out["verdict"] = "changed"
    else:
        went_down = change < 0
        out["verdict"] = "improved" if went_down == (figure.better == "lower") else "worsened"
    return out


def load_check(
    *,
    qps_before: list[float],
    qps_after: list[float],
    nodes_before: list[float],
    nodes_after: list[float],
    tolerance: float,
    min_samples: int,
) -> tuple[dict, str]:
    """(the load-similarity statement, why the comparison cannot be credited or "" when it can)."""
    qb = _median(sorted(qps_before)) if qps_before else None
    qa = _median(sorted(qps_after)) if qps_after else None
    nb = _median(sorted(nodes_before)) if nodes_before else None
    na = _median(sorted(nodes_after)) if nodes_after else None
    ratio = qa / qb if qb and qa is not None else None
    load = {
        "qps_before": qb,
        "qps_after": qa,
        "qps_ratio": ratio,
        "tolerance": tolerance,
        "samples_before": len(qps_before),
        "samples_after": len(qps_after),
        "min_samples": min_samples,
        "nodes_before": nb,
        "nodes_after": na,
    }
    if len(qps_before) < min_samples or len(qps_after) < min_samples:
        return load, (
            f"too few samples: {len(qps_before)} 1 s samples before and {len(qps_after)} after "
            f"(at least {min_samples} each)"
        )
    if nb is not None and na is not None and na < nb:
        return load, f"nodes lost: the pool reported {nb:g} nodes before and {na:g} after"
    if not qb:
        return load, "no traffic before the change: nothing to compare against"
    if abs(ratio - 1) > tolerance:
        return load, (
            f"load shifted: {qb:.2f} QPS before, {qa:.2f} after (ratio {ratio:.2f}, "
            f"beyond the ±{tolerance:.0%} tolerance)"
        )
    return load, ""


def overall_outcome(verdicts: dict[str, dict]) -> str:
    """improved / worsened / mixed / no_change, decided by P99 and throughput; the other figures decide only when
    neither of those moved."""
    for keys in (LEADS, [k for k in FIGURE_KEYS if k not in LEADS]):
        moved = {verdicts[k]["verdict"] for k in keys if k in verdicts} & {"improved", "worsened"}
        if moved == {"improved", "worsened"}:
            return "mixed"
        if moved:
            return moved.pop()
    return "no_change"


def outcome_sentence(verdicts: dict[str, dict], before: dict, after: dict, load: dict) -> str:
    """One sentence a reader of the record needs: the leading figures' movement and the load it was measured at."""
    parts = []
    for key in LEADS:
        verdict = verdicts.get(key) or {}
        b, a = (before.get(key) or {}).get("median"), (after.get(key) or {}).get("median")
        if b is None or a is None:
            parts.append(f"{LABELS[key]}: no data")
            continue
        word = {"improved": "improved", "worsened": "worsened"}.get(verdict.get("verdict"), "no change beyond noise")
        parts.append(f"{LABELS[key]} {b:.3g} → {a:.3g} ({word}, p={verdict.get('p_value') or 1:.3g})")
    ratio = load.get("qps_ratio")
    similar = f"at similar load (QPS ratio {ratio:.2f})" if ratio is not None else "load unknown"
    return "; ".join(parts) + f"; {similar}"


def _median(ordered: list[float]) -> float:
    n = len(ordered)
    mid = n // 2
    return ordered[mid] if n % 2 else (ordered[mid - 1] + ordered[mid]) / 2
