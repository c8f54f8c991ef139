"""The report's rules on a pool's window figures, each a suggestion that cites the figures behind it.

- batch idle above the warning line (seed: 15 %): lower `batch.max_size` to the batch size that covers 90 % of the
  batches the pool ran in the window (a quarter lower when no distribution was reported), never below `batch.min_size`;
- share of requests above 1k tokens above 5 %: the long-context queue. While `batch.long_context_threshold` is above
  1,024 tokens, lower it to 1,024 so those requests leave the short queue (the seed's separate path); at or below,
  advice on the long queue's size and depth only;
- speculative rejection above 40 %: one candidate token fewer (`speculative.num_speculative_tokens`, seed: 3-5); at
  3 already, or above the critical line (60 %), speculative decoding off;
- P99 above the SLO's warning line in the seconds whose load is above `degradation.load_threshold` (seed: 80 %):
  the degradation settings: enter 0.1 earlier (kept above the exit threshold), the seed's max_tokens 128, and no
  speculative decoding while degraded.

A figure exactly at its line is not above it (the alert rules compare the same way). A figure with too few seconds in
the window (`figures.MIN_SAMPLES`) gives no suggestion.
"""

import math

from django.db.models import TextChoices

from controlplane.advice.figures import MIN_SAMPLES, WindowFigures
from controlplane.params.schema import FIELDS_BY_PATH


class Severity(TextChoices):
    """critical and warning: a figure above the alert rule's line; info: a record's suggestion; caution: a field
    whose past changes worsened the pool."""

    CRITICAL = "critical"
    WARNING = "warning"
    INFO = "info"
    CAUTION = "caution"


BATCH_COVERAGE = 0.9
LONG_CONTEXT_TOKENS = 1024
DEGRADED_MAX_TOKENS = 128  # seed: max_tokens 128 under load
THRESHOLD_STEP = 0.1
THRESHOLD_GAP = 0.05  # the entry line stays this far above the exit line (the schema wants exit < entry)


def rule_suggestions(figures: WindowFigures, params: dict, lines: dict[str, tuple[float, float | None]]) -> list[dict]:
    """Every rule's suggestion for these figures and the running version's effective `params`; `lines` maps an alert
    rule's name to its (warning, critical) lines."""
    found = [
        batch_idle(figures, params, lines["batch-idle"]),
        long_requests(figures, params, lines["long-requests"]),
        speculative_rejection(figures, params, lines["spec-decode-rejection"]),
        p99_under_load(figures, params, lines["p99-latency"]),
    ]
    return [s for s in found if s is not None]


def suggestion(*, id: str, rule: str, severity: str, title: str, text: str, changes: list[dict], evidence: list[dict]):
    return {
        "id": id,
        "source": "rule",
        "rule": rule,
        "severity": severity,
        "title": title,
        "text": text,
        "changes": changes,
        "is_actionable": bool(changes),
        "evidence": evidence,
        "records": [],
        "cautions": [],
    }


def change(path: str, before, after) -> dict:
    return {"path": path, "from": before, "to": after, "apply": FIELDS_BY_PATH[path].apply}


def figure(label: str, value, *, metric: str | None = None, samples: int | None = None, unit: str = "share") -> dict:
    """One cited figure; `metric` names the pool history series it was read from (the page links it). `unit`:
    "share" (a fraction, shown as a percentage), "s" or "" (a count)."""
    return {
        "label": label,
        "value": value,
        "unit": unit,
        "display": display(value, unit),
        "metric": metric,
        "samples": samples,
    }


def display(value, unit: str) -> str:
    if value is None:
        return "unknown"
    if unit == "share":
        return f"{value:.1%}"
    if unit == "s":
        return f"{value:.3f} s"
    return f"{value:g}"


def _level(value: float, line: tuple[float, float | None]) -> str | None:
    warn, critical = line
    if critical is not None and value > critical:
        return "critical"
    return "warning" if value > warn else None


def batch_idle(figures: WindowFigures, params: dict, line) -> dict | None:
    idle = figures.mean("batch_idle_ratio")
    if idle is None or (level := _level(idle, line)) is None:
        return None
    batch = params["batch"]
    current, smallest = batch["max_size"], batch["min_size"]
    observed = covering_batch_size(figures.batch_size_hist, BATCH_COVERAGE)
    evidence = [
        figure(
            "batch idle ratio, window mean",
            idle,
            metric="batch_idle_ratio",
            samples=figures.samples["batch_idle_ratio"],
        ),
        figure(f"line ({level})", line[1] if level == "critical" else line[0]),
    ]
    if observed is not None:
        target = observed
        evidence.append(figure("batch size covering 90 % of batches", observed, metric="batch_size_hist", unit=""))
        how = f"90 % of the batches the pool ran held at most {observed} requests"
    else:
        target = math.floor(current * 0.75)
        how = "no batch size distribution was reported, so a quarter lower"
    target = max(smallest, min(target, current - 1))
    title = f"Batches run idle {idle:.0%} of the time (line {line[0]:.0%})"
    if target >= current:
        text = (
            f"batch.max_size is already at batch.min_size ({smallest}); look at batch.timeout_ms and the pool's "
            "traffic instead."
        )
        return suggestion(
            id="batch-idle", rule="batch-idle", severity=level, title=title, text=text, changes=[], evidence=evidence
        )
    text = f"Lower batch.max_size from {current} to {target}: {how}."
    return suggestion(
        id="batch-idle",
        rule="batch-idle",
        severity=level,
        title=title,
        text=text,
        changes=[change("batch.max_size", current, target)],
        evidence=evidence,
    )


def covering_batch_size(histogram: dict[int, float], coverage: float) -> int | None:
    """The smallest batch size that at least `coverage` of the counted batches did not exceed; None without counts."""
    total = math.fsum(n for n in histogram.values() if n > 0)
    if total <= 0:
        return None
    seen = 0.0
    for size in sorted(histogram):
        seen += max(0.0, histogram[size])
        if seen >= coverage * total - 1e-9:
            return size
    return max(histogram)


def long_requests(figures: WindowFigures, params: dict, line) -> dict | None:
    share = figures.mean("long_request_share")
    if share is None or (level := _level(share, line)) is None:
        return None
    batch = params["batch"]
    threshold = batch["long_context_threshold"]
    evidence = [
        figure(
            "share of requests above 1k tokens, window mean",
            share,
            metric="long_request_share",
            samples=figures.samples["long_request_share"],
        ),
        figure("line", line[0]),
    ]
    counted = math.fsum(figures.length_hist.values())
    if counted > 0:
        above_2k = figures.length_hist.get("gt2k", 0) / counted
        evidence.append(figure("share above 2k tokens (length distribution)", above_2k, metric="length_hist"))
    title = f"{share:.1%} of requests are above 1k tokens (line {line[0]:.0%})"
    if threshold > LONG_CONTEXT_TOKENS:
        text = (
            f"Lower batch.long_context_threshold from {threshold} to {LONG_CONTEXT_TOKENS} so requests above 1k tokens "
            "take the long-context queue instead of holding up short batches; check batch.long_context_max_size "
            f"({batch['long_context_max_size']}) and batch.long_context_max_queue ({batch['long_context_max_queue']}) "
            "against the long queue's depth after the change."
        )
        changes = [change("batch.long_context_threshold", threshold, LONG_CONTEXT_TOKENS)]
    else:
        text = (
            f"Requests above {threshold} tokens already take the long-context queue: look at its depth "
            f"(queue_depth_long) against batch.long_context_max_queue ({batch['long_context_max_queue']}) and "
            f"batch.long_context_max_size ({batch['long_context_max_size']}), and at where the long prompts come from."
        )
        changes = []
    return suggestion(
        id="long-requests",
        rule="long-requests",
        severity=level,
        title=title,
        text=text,
        changes=changes,
        evidence=evidence,
    )


def speculative_rejection(figures: WindowFigures, params: dict, line) -> dict | None:
    spec = params["speculative"]
    rejection = figures.mean("spec_rejection_rate")
    if not spec["enabled"] or rejection is None or (level := _level(rejection, line)) is None:
        return None
    tokens = spec["num_speculative_tokens"]
    fewest = int(FIELDS_BY_PATH["speculative.num_speculative_tokens"].minimum)
    evidence = [
        figure(
            "speculative rejection rate, window mean",
            rejection,
            metric="spec_rejection_rate",
            samples=figures.samples["spec_rejection_rate"],
        ),
        figure(f"line ({level})", line[1] if level == "critical" else line[0]),
    ]
    title = f"The draft model's tokens are rejected {rejection:.0%} of the time (line {line[0]:.0%})"
    if level == "critical" or tokens <= fewest:
        why = "above the critical line" if level == "critical" else f"already at the fewest candidates ({fewest})"
        text = f"Turn speculative decoding off ({why}); a rejected draft costs the main model's time for nothing."
        changes = [change("speculative.enabled", True, False)]
    else:
        text = f"Propose fewer candidates: speculative.num_speculative_tokens from {tokens} to {tokens - 1}."
        changes = [change("speculative.num_speculative_tokens", tokens, tokens - 1)]
    return suggestion(
        id="spec-rejection",
        rule="spec-decode-rejection",
        severity=level,
        title=title,
        text=text,
        changes=changes,
        evidence=evidence,
    )


def p99_under_load(figures: WindowFigures, params: dict, line) -> dict | None:
    degradation = params["degradation"]
    if figures.loaded_seconds < MIN_SAMPLES or figures.loaded_p99_s is None:
        return None
    p99 = figures.loaded_p99_s
    if (level := _level(p99, line)) is None:
        return None
    entry, leave = degradation["load_threshold"], degradation["exit_threshold"]
    evidence = [
        figure(
            f"P99 in the seconds with load above {entry:.0%}",
            p99,
            metric="latency_p99_s",
            samples=figures.loaded_seconds,
            unit="s",
        ),
        figure("SLO warning line", line[0], unit="s"),
        figure("load, window mean", figures.load_mean),
    ]
    changes = []
    lower = round(entry - THRESHOLD_STEP, 2)
    if lower >= leave + THRESHOLD_GAP:
        changes.append(change("degradation.load_threshold", entry, lower))
    if degradation["max_tokens"] > DEGRADED_MAX_TOKENS:
        changes.append(change("degradation.max_tokens", degradation["max_tokens"], DEGRADED_MAX_TOKENS))
    if degradation["speculative_decoding"] and params["speculative"]["enabled"]:
        changes.append(change("degradation.speculative_decoding", True, False))
    parts = [f"{c['path']} {c['from']} -> {c['to']}" for c in changes]
    text = (
        "Degrade earlier and harder under load: " + "; ".join(parts) + "."
        if changes
        else "The degradation settings are already at the seed's and cannot enter earlier above the exit threshold: "
        "the pool needs capacity (nodes) rather than a parameter."
    )
    return suggestion(
        id="p99-under-load",
        rule="p99-latency",
        severity=level,
        title=f"P99 {p99:.2f} s above the {line[0]:g} s SLO line while load is above {entry:.0%}",
        text=text,
        changes=changes,
        evidence=evidence,
    )
