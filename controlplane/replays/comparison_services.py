"""Creating a replay comparison: check the runs may be compared, compute the result, store it with its audit entry."""

from django.db import transaction

from controlplane.audit.services import audit_record, mutating_service
from controlplane.impact.comparisons import impact_record_comparison
from controlplane.lib.errors import InvalidField
from controlplane.nodes.services.canary_analysis import p99_thresholds
from controlplane.params.diff import params_diff
from controlplane.replays import noise
from controlplane.replays.comparison import RunInput, SloLines, compare_runs
from controlplane.replays.comparison_models import ReplayComparison, ReplayComparisonRun
from controlplane.replays.figure_selectors import run_is_simulated, run_label, run_records
from controlplane.replays.figures import run_figures
from controlplane.replays.models import ReplayRun

MAX_RUNS = 6
# Repeat runs of a compared version (same traffic, same template content) whose spread joins the noise verdict.
MAX_REPEATS = 5
MAX_RESAMPLES = 10000
# Ids are 64-bit: a larger number names no run (and the database would refuse to compare with it).
MAX_ID = 2**63


def traffic_key(run: ReplayRun) -> tuple:
    """What makes two runs' traffic the same: the log, the selection from it, and the pacing."""
    log = getattr(run, "log_id", None) or run.log_name
    return (
        log,
        run.selection,
        run.sample_size,
        run.sample_seed,
        run.top_n,
        run.pacing,
        run.qps,
        tuple(run.qps_steps or ()),
        run.step_s,
        run.time_scale,
    )


def _checked_runs(run_ids, *, force: bool) -> list[ReplayRun]:
    if not isinstance(run_ids, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) and 0 < i < MAX_ID for i in run_ids
    ):
        raise InvalidField("runs", "must be a list of replay run ids, the baseline first")
    if len(run_ids) < 2 or len(run_ids) > MAX_RUNS:
        raise InvalidField("runs", f"name between 2 and {MAX_RUNS} runs, got {len(run_ids)}")
    if len(set(run_ids)) != len(run_ids):
        raise InvalidField("runs", "names a run more than once")
    found = {
        r.pk: r for r in ReplayRun.objects.select_related("pool", "template_version__template").filter(pk__in=run_ids)
    }
    missing = [i for i in run_ids if i not in found]
    if missing:
        raise InvalidField("runs", f"no replay run {', '.join(map(str, missing))}")
    runs = [found[i] for i in run_ids]
    unfinished = [r for r in runs if r.status not in ReplayRun.FINISHED]
    if unfinished:
        detail = ", ".join(f"run {r.pk} is {r.status}" for r in unfinished)
        raise InvalidField("runs", f"only finished runs can be compared: {detail}")
    if not force:
        keys = {traffic_key(r) for r in runs}
        if len(keys) > 1:
            detail = "; ".join(f"run {r.pk}: log {r.log_name!r}, selection {r.selection}, qps {r.qps}" for r in runs)
            raise InvalidField(
                "runs",
                f"the runs replayed different traffic ({detail}); compare runs of the same log, selection and pacing, "
                "or set force with a reason",
            )
    lines = {r.ladder.p99_max_s for r in runs if r.ladder is not None}
    if len(lines) > 1:
        detail = ", ".join(f"run {r.pk}: {r.ladder.p99_max_s:g} s" for r in runs if r.ladder is not None)
        raise InvalidField(
            "runs",
            f"the ladder runs were judged against different first-round P99 lines ({detail}); sustained QPS on "
            "different lines is not comparable: compare ladders replayed with the same slo_p99_s",
        )
    return runs


def _repeats(run: ReplayRun, compared: set[int]) -> dict[int, dict]:
    """Figures of earlier finished runs of the same version content on the same traffic (not compared themselves)."""
    if not run.template_hash and not run.template_version_id:
        return {}
    same_version = (
        {"template_hash": run.template_hash} if run.template_hash else {"template_version": run.template_version_id}
    )
    candidates = (
        ReplayRun.objects.filter(status=ReplayRun.Status.SUCCEEDED, pool=run.pool_id, **same_version)
        .exclude(pk__in=compared)
        .order_by("-created_at")
    )
    key = traffic_key(run)
    repeats = {}
    for other in candidates[: MAX_REPEATS * 4]:
        if traffic_key(other) == key:
            # Judged on the compared run's line: the same traffic, so the same steps (traffic_key).
            repeats[other.pk] = run_figures(run_records(run=other), pool_metrics=other.pool_metrics, ladder=run.ladder)
        if len(repeats) >= MAX_REPEATS:
            break
    return repeats


def _version_changes(base: ReplayRun, other: ReplayRun) -> list[dict]:
    if not base.template_version_id or not other.template_version_id:
        return []
    old, new = base.template_version, other.template_version
    changes = params_diff(
        old.effective_params, new.effective_params, old_models=old.pinned_models, new_models=new.pinned_models
    )
    return [change.as_dict() for change in changes]


def _run_info(run: ReplayRun) -> dict:
    return {
        "pool": run.pool.name,
        "template_version": str(run.template_version) if run.template_version_id else None,
        "template_hash": run.template_hash,
        "log_name": run.log_name,
        "status": run.status,
        "qps": run.qps,
        "qps_steps": run.qps_steps or None,
        "step_s": run.step_s,
        "slo_p99_s": run.ladder.p99_max_s if run.ladder is not None else None,
        "started_at": run.started_at.isoformat() if run.started_at else None,
        "finished_at": run.finished_at.isoformat() if run.finished_at else None,
    }


@mutating_service
def replay_comparison_create(
    *,
    actor,
    run_ids,
    label: str = "",
    force: bool = False,
    reason: str = "",
    seed: int = noise.DEFAULT_SEED,
    resamples: int = noise.RESAMPLES,
) -> ReplayComparison:
    """Compare finished runs of the same traffic (the first is the baseline) and store the result."""
    if isinstance(resamples, bool) or not isinstance(resamples, int) or not 100 <= resamples <= MAX_RESAMPLES:
        raise InvalidField("resamples", f"must be an integer between 100 and {MAX_RESAMPLES}, got {resamples!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**62:
        raise InvalidField("seed", f"must be a non-negative integer below 2^62, got {seed!r}")
    reason = (reason or "").strip()
    if force and not reason:
        raise InvalidField("reason", "required with force: say why runs of different traffic are compared")
    runs = _checked_runs(run_ids, force=force)
    compared = {r.pk for r in runs}
    inputs = []
    for run in runs:
        records = run_records(run=run)
        if not records:
            raise InvalidField("runs", f"run {run.pk} has no requests to compare")
        inputs.append(
            RunInput(
                run_id=run.pk,
                label=run_label(run),
                records=records,
                pool_metrics=run.pool_metrics,
                ladder=run.ladder,
                info=_run_info(run),
                is_simulated=run_is_simulated(run=run, records=records),
                repeats=_repeats(run, compared),
            )
        )
    warn, critical = p99_thresholds()
    result = compare_runs(
        inputs,
        slo=SloLines(warn_s=warn, critical_s=critical),
        seed=seed,
        resamples=resamples,
        version_diffs=[_version_changes(runs[0], other) for other in runs[1:]],
    )
    forced_reason = reason if force and len({traffic_key(r) for r in runs}) > 1 else ""
    with transaction.atomic():
        comparison = ReplayComparison.objects.create(
            label=(label or "").strip()[:200],
            created_by=actor,
            forced_reason=forced_reason,
            seed=seed,
            resamples=resamples,
            result=result,
        )
        ReplayComparisonRun.objects.bulk_create(
            ReplayComparisonRun(comparison=comparison, run=run, position=i) for i, run in enumerate(runs)
        )
        audit_record(
            actor=actor,
            action="replay.compare",
            target=comparison,
            after={"runs": [r.pk for r in runs], "verdict": result["verdict"], "forced": bool(forced_reason)},
            reason=forced_reason,
        )
        impact_record_comparison(comparison=comparison, runs=runs)
    return comparison
