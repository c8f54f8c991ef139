"""The canary's verdict for one analysis window: its nodes' figures against the rest of the pool (the baseline) and the
p99-latency alert rule's lines (pass | fail | hold), with the evidence a person reads on the pool page and in the
audit. Figures are window means of the nodes' 1 s samples (controlplane/nodes/services/rollouts.py decides when a
window has passed and what a verdict does).

A canary node whose samples arrive but finished no request while requests were in flight is slow, not silent: its
requests take longer than its sample window (`sample_window_s()`), so no sample has a P99 to show. Where that window
is at least the critical line (10 s against the seed's 2 s) the canary is above it and fails; with a shorter window
the stage holds, saying which nodes are slow, and the usual two-window limit fails it. A node that sends too few
samples at all is missing ("no recent metrics"), and holds the stage.
"""

import math
from datetime import datetime, timedelta

from controlplane.alerts.models import AlertRuleVersion
from controlplane.metrics.models import MetricSample
from controlplane.metrics.samples import sample_window_s
from controlplane.metrics.selectors import history
from controlplane.nodes.models import Rollout

# Canary P99 above baseline × this (and above the warning line) fails; so does any P99 above the critical line.
P99_RATIO = 1.5
# Canary error rate above the baseline's by more than this (one percentage point) fails.
ERROR_RATE_MARGIN = 0.01
# Spec-decode acceptance lower than the baseline's by more than this (20 points), where both decode speculatively.
ACCEPTANCE_DROP = 0.20
# Seed thresholds, used when the p99-latency rule is missing or disabled.
P99_WARN_S, P99_CRITICAL_S = 1.6, 2.0
# A canary node with fewer samples than this share of the window is "missing": its figures would not mean much.
MIN_SAMPLE_SHARE = 0.25
COMPARED = ("latency_p99_s", "error_rate", "spec_acceptance_rate")
# Requests in the node at a sample's time: in the engine, or in the gateway's queues.
IN_FLIGHT = ("requests_running", "requests_waiting", "queue_depth_short", "queue_depth_long")


def rollout_analysis(*, rollout: Rollout, now: datetime) -> dict:
    """Canary against baseline over the last window: figures, thresholds and a verdict (pass | fail | hold)."""
    window = rollout.pool.analysis_window_s
    canary_names = set(rollout.canary_nodes)
    baseline_names = set(rollout.pool.nodes.values_list("name", flat=True)) - canary_names
    warn, critical = p99_thresholds()
    canary, missing, slow = _figures(sorted(canary_names), window, now)
    baseline, _, _ = _figures(sorted(baseline_names), window, now)
    evidence = {
        "stage": rollout.stage_index,
        "at": now.isoformat(),
        "window_s": window,
        "canary_nodes": sorted(canary_names),
        "canary": canary,
        "baseline": baseline,
        "thresholds": {
            "p99_warn_s": warn,
            "p99_critical_s": critical,
            "p99_ratio": P99_RATIO,
            "error_rate_margin": ERROR_RATE_MARGIN,
            "acceptance_drop": ACCEPTANCE_DROP,
        },
        "reasons": [],
    }
    if missing:
        evidence["verdict"] = "hold"
        evidence["reasons"].append("no recent metrics from " + ", ".join(missing))
        return evidence
    unfinished = sample_window_s()
    if slow:
        evidence["slow_nodes"] = slow
        whose = "its" if len(slow) == 1 else "their"
        described = f"{', '.join(slow)} finished no request within {whose} {unfinished} s sample windows"
        if critical is None or unfinished < critical:
            evidence["verdict"] = "hold"
            evidence["reasons"].append(f"{described} while requests were in flight: slower than {unfinished} s")
            return evidence
    reasons = evidence["reasons"]
    p99, base_p99 = canary["latency_p99_s"], baseline["latency_p99_s"]
    if slow:
        reasons.append(f"canary P99 is above the critical line {critical} s: {described} while requests were in flight")
    elif p99 is not None and critical is not None and p99 > critical:
        reasons.append(f"canary P99 {p99:.3f} s is above the critical line {critical} s")
    elif p99 is not None and p99 > warn and (base_p99 is None or p99 > base_p99 * P99_RATIO):
        compared = "" if base_p99 is None else f" and {P99_RATIO}× the baseline's {base_p99:.3f} s"
        reasons.append(f"canary P99 {p99:.3f} s is above the warning line {warn} s{compared}")
    errors, base_errors = canary["error_rate"], baseline["error_rate"]
    if errors is not None and errors > (base_errors or 0.0) + ERROR_RATE_MARGIN:
        reasons.append(f"canary error rate {errors:.2%} is above the baseline's {(base_errors or 0.0):.2%} + 1 point")
    acceptance, base_acceptance = canary["spec_acceptance_rate"], baseline["spec_acceptance_rate"]
    if acceptance is not None and base_acceptance is not None and base_acceptance - acceptance > ACCEPTANCE_DROP:
        reasons.append(
            f"spec-decode acceptance {acceptance:.0%} is more than 20 points below the baseline's {base_acceptance:.0%}"
        )
    evidence["verdict"] = "fail" if reasons else "pass"
    return evidence


def p99_thresholds() -> tuple[float, float | None]:
    """The p99-latency alert rule's warning and critical lines (its newest enabled version), else the seed's."""
    version = AlertRuleVersion.objects.filter(rule__name="p99-latency").order_by("-number").first()
    if version is None or not version.is_enabled:
        return P99_WARN_S, P99_CRITICAL_S
    return version.warn, version.critical


def _figures(names: list[str], window: float, now: datetime) -> tuple[dict, list[str], list[str]]:
    """Window means over these nodes' 1 s samples, which nodes sent too few samples to count (missing), and which sent
    enough but finished no request in most of them while requests were in flight (slow)."""
    values: dict[str, list[float]] = {metric: [] for metric in COMPARED}
    missing, slow = [], []
    needed = max(1, window * MIN_SAMPLE_SHARE)
    for name in names:
        _, columns = history(
            scope=MetricSample.Scope.NODE,
            name=name,
            metrics=[*COMPARED, "rejected_rate", *IN_FLIGHT],
            since=now - timedelta(seconds=window),
            until=now,
            resolution_s=MetricSample.Resolution.SECOND,
        )
        for metric in COMPARED:
            values[metric].extend(v for v in map(_number, columns[metric]) if v is not None)
        measured = sum(_number(v) is not None for v in columns["latency_p99_s"])
        if measured >= needed:
            continue
        # error_rate and rejected_rate are null exactly when no request ended in the sample's window.
        unfinished = sum(
            _number(columns["error_rate"][i]) is None
            and _number(columns["rejected_rate"][i]) is None
            and any((_number(columns[key][i]) or 0) > 0 for key in IN_FLIGHT)
            for i in range(len(columns["latency_p99_s"]))
        )
        (slow if measured + unfinished >= needed else missing).append(name)
    figures = {metric: sum(found) / len(found) if found else None for metric, found in values.items()}
    return figures, missing, slow


def _number(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)
