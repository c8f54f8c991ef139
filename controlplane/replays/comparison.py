"""The result of comparing two or more replay runs of the same traffic (pure: inputs are plain records).

The first run is the baseline; every other run's figures are set beside it with the difference, the bootstrap
interval of the difference and whether it is beyond run-to-run noise (controlplane/replays/noise.py), and each run's
P99 is held against the SLO lines the p99-latency alert uses. The result is stored as JSON on a ReplayComparison.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from controlplane.replays import noise
from controlplane.replays.figures import Ladder, latency_cdf, run_figures
from controlplane.replays.sustained import SLO_P99_S

# The report's target (P99 <= 1.8 s at 50 QPS); the alert's warning and critical lines come from the p99-latency rule.
P99_TARGET_S = SLO_P99_S
P99_FIGURE = "latency.e2e_s.p99"
FIRST_ROUND_P99_FIGURE = "latency.first_round_s.p99"
SUSTAINED_FIGURE = "ladder.sustained_qps"


@dataclass
class RunInput:
    """One run to compare: its identity, its request records and the figures of repeat runs of its version."""

    run_id: int
    label: str
    records: Sequence[Mapping]
    pool_metrics: Mapping | None = None
    ladder: Ladder | None = None
    info: dict = field(default_factory=dict)
    is_simulated: bool = False
    repeats: dict[int, dict] = field(default_factory=dict)  # run id -> run_figures of a repeat (same version, log)


@dataclass(frozen=True)
class SloLines:
    warn_s: float
    critical_s: float | None
    target_s: float = P99_TARGET_S


def slo_level(p99: float | None, slo: SloLines) -> str:
    if p99 is None:
        return "unknown"
    if slo.critical_s is not None and p99 > slo.critical_s:
        return "critical"
    if p99 > slo.warn_s:
        return "warn"
    return "ok"


def _standing(p99: float | None, level: str, slo: SloLines) -> str:
    """`1.472 s, at or below the 1.6 s warning line` and the like."""
    if level == "unknown":
        return "no P99: no successful request"
    if level == "ok":
        return f"{p99:.3f} s, at or below the {slo.warn_s:g} s warning line"
    line = slo.critical_s if level == "critical" else slo.warn_s
    name = "critical" if level == "critical" else "warning"
    return f"{p99:.3f} s, above the {line:g} s {name} line"


def compare_runs(
    runs: Sequence[RunInput],
    *,
    slo: SloLines,
    seed: int = noise.DEFAULT_SEED,
    resamples: int = noise.RESAMPLES,
    version_diffs: Sequence[list] | None = None,
) -> dict:
    """The stored result: per-run figures, every figure side by side with its differences, the SLO verdict."""
    if len(runs) < 2:
        raise ValueError("compare at least two runs")
    if len({run.ladder.p99_max_s for run in runs if run.ladder is not None}) > 1:
        raise ValueError("ladder runs judged against different P99 lines are not comparable")
    per_run = [run_figures(run.records, pool_metrics=run.pool_metrics, ladder=run.ladder) for run in runs]
    intents = sorted({name for figures in per_run for name in figures["intents"]})
    catalogue = noise.base_figures() + noise.intent_figures(intents)
    if any(run.ladder is not None for run in runs):
        catalogue += noise.ladder_figures()
    run_samplers = [noise.samplers(run.records, catalogue, ladder=run.ladder) for run in runs]
    base = runs[0]
    rows = []
    for figure in catalogue:
        values = [figure.value(figures) for figures in per_run]
        spreads = [
            noise.repeat_spread([figure.value(f) for f in [per_run[i], *run.repeats.values()]])
            for i, run in enumerate(runs)
        ]
        comparisons = []
        for i in range(1, len(runs)):
            interval = noise.difference_interval(
                run_samplers[0][figure.key],
                run_samplers[i][figure.key],
                seed=f"{seed}:{figure.key}:{base.run_id}:{runs[i].run_id}",
                resamples=resamples,
            )
            verdict = noise.compare_figure(figure, values[0], values[i], interval, (spreads[0], spreads[i]))
            comparisons.append({"run_id": runs[i].run_id, **verdict})
        rows.append(
            {
                "key": figure.key,
                "label": figure.label,
                "unit": figure.unit,
                "better": figure.better,
                "values": values,
                "spreads": spreads,
                "comparisons": comparisons,
            }
        )
    slo_block = _slo_block(runs, per_run, slo)
    return {
        "method": {
            "percentiles": "nearest-rank: the value of rank ceil(P/100 * n) among the successful requests",
            "bootstrap": f"percentile bootstrap over requests, {resamples} resamples per figure, seed {seed}, "
            f"{noise.CONFIDENCE:.0%} interval; beyond noise: the interval excludes 0 and the difference is larger "
            "than the spread of repeat runs of either version",
            "resamples": resamples,
            "seed": seed,
            "confidence": noise.CONFIDENCE,
        },
        "is_simulated": any(run.is_simulated for run in runs),
        "baseline_run_id": base.run_id,
        "runs": [
            {
                "run_id": run.run_id,
                "label": run.label,
                **run.info,
                "is_simulated": run.is_simulated,
                "repeat_run_ids": sorted(run.repeats),
                "figures": figures,
                "latency_cdf": latency_cdf(run.records),
            }
            for run, figures in zip(runs, per_run, strict=True)
        ],
        "figures": rows,
        "version_diffs": [
            {"run_id": run.run_id, "changes": list(changes)}
            for run, changes in zip(runs[1:], version_diffs or [[] for _ in runs[1:]], strict=True)
        ],
        "slo": slo_block,
        "verdict": _verdict(runs, rows, slo_block),
    }


def _slo_block(runs: Sequence[RunInput], per_run: list[dict], slo: SloLines) -> dict:
    entries = []
    for run, figures in zip(runs, per_run, strict=True):
        p99 = figures["latency"]["e2e_s"]["p99"]
        level = slo_level(p99, slo)
        entries.append(
            {
                "run_id": run.run_id,
                "label": run.label,
                "p99_s": p99,
                "p99_seq": figures["latency"]["e2e_s"]["p99_seq"],
                "first_round_p99_s": figures["latency"]["first_round_s"]["p99"],
                "first_round_p99_seq": figures["latency"]["first_round_s"]["p99_seq"],
                "sustained_qps": figures.get("ladder", {}).get("sustained_qps"),
                "level": level,
                "meets_slo": level == "ok",
                "meets_target": p99 is not None and p99 <= slo.target_s,
                "text": _standing(p99, level, slo),
            }
        )
    return {"warn_s": slo.warn_s, "critical_s": slo.critical_s, "target_s": slo.target_s, "runs": entries}


def _noise_word(comparison: dict) -> str:
    return "beyond noise" if comparison["beyond_noise"] else "within noise"


def _verdict(runs: Sequence[RunInput], rows: list[dict], slo_block: dict) -> list[str]:
    """One sentence per compared run: the SLO standing of both, and the P99 difference with its noise verdict, e.g.
    "run 7 (chat v7) meets the P99 SLO, run 6 (chat v6) does not (...); run 7 (chat v7) P99 -0.900 s vs ...", then
    the first-round P99 (what the user waits for), each with its verdict. Ladder runs are judged step by step, so
    their sentence is the sustained QPS of each (a P99 over every step at once would mix loads)."""
    p99_row = next(row for row in rows if row["key"] == P99_FIGURE)
    first_row = next(row for row in rows if row["key"] == FIRST_ROUND_P99_FIGURE)
    sustained_row = next((row for row in rows if row["key"] == SUSTAINED_FIGURE), None)
    base, base_entry = runs[0], slo_block["runs"][0]
    sentences = []
    for i, run in enumerate(runs[1:], start=1):
        entry = slo_block["runs"][i]
        values = sustained_row["values"] if sustained_row is not None else [None]
        if values[0] is not None and values[i] is not None:
            more = sustained_row["comparisons"][i - 1]
            line = next(r.ladder.p99_max_s for r in runs if r.ladder is not None)
            sentences.append(
                f"{run.label[0].upper()}{run.label[1:]} sustains {values[i]:g} QPS and {base.label} {values[0]:g} QPS "
                f"with first-round P99 <= {line:g} s and errors within bounds at every step up to it "
                f"({more['diff']:+g} QPS, {_noise_word(more)})."
            )
            continue
        if entry["meets_slo"] and base_entry["meets_slo"]:
            standing = f"{run.label} and {base.label} both meet the P99 SLO"
        elif entry["meets_slo"]:
            standing = f"{run.label} meets the P99 SLO, {base.label} does not"
        elif base_entry["meets_slo"]:
            standing = f"{run.label} does not meet the P99 SLO, {base.label} does"
        else:
            standing = f"neither {run.label} nor {base.label} meets the P99 SLO"
        sentence = f"{standing} ({run.label}: {entry['text']}; {base.label}: {base_entry['text']})"
        comparison = p99_row["comparisons"][i - 1]
        if comparison["diff"] is not None:
            noise_word = "beyond noise" if comparison["beyond_noise"] else "within noise"
            sentence += f"; {run.label} P99 {comparison['diff']:+.3f} s vs {base.label} ({noise_word})"
        first = first_row["comparisons"][i - 1]
        if first["diff"] is not None:
            sentence += f"; first-round P99 {first['diff']:+.3f} s ({_noise_word(first)})"
        sentences.append(sentence[0].upper() + sentence[1:] + ".")
    return sentences
