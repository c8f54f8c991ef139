"""Audited writes to tuning studies: start one on a non-production pool, cancel one."""

import itertools

from django.conf import settings
from django.db import transaction

from controlplane.accounts.roles import Action
from controlplane.audit.services import audit_record, mutating_service
from controlplane.lib import background
from controlplane.lib.errors import Conflict, Forbidden, InvalidField, required_text
from controlplane.lib.runs import run_cancel
from controlplane.nodes.models import Pool
from controlplane.params.exceptions import DocumentInvalid
from controlplane.params.models import TemplateVersion
from controlplane.params.schema import ROOT
from controlplane.params.services.templates import document_validate
from controlplane.replays.comparison import P99_TARGET_S
from controlplane.replays.models import ReplayRun
from controlplane.replays.sustained import DEFAULT_ERROR_RATE_MAX, MAX_LADDER_STEPS
from controlplane.tuning import space as search
from controlplane.tuning.models import TuningStudy
from controlplane.tuning.realtime import study_progress

MAX_LADDER = MAX_LADDER_STEPS
MAX_TRIAL_DURATION_S = 600
# Replays per trial (and per ladder step): the trial's figures are their median, less noisy than one short replay.
MAX_REPEATS = 10


def _whole(field: str, value, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidField(field, f"must be a whole number, got {value!r}")
    if not low <= value <= high:
        raise InvalidField(field, f"must be between {low} and {high}, got {value}")
    return value


def _qps(field: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.01 <= value <= settings.REPLAY_MAX_QPS:
        raise InvalidField(field, f"must be a number between 0.01 and {settings.REPLAY_MAX_QPS}, got {value!r}")
    return float(value)


def replay_spec_check(raw, *, objective: str) -> dict:
    """The replay each trial runs: selection of the log, arrival, seconds per replay, QPS (or a ladder for max_qps),
    and how many times it is repeated (the trial's figures are the repeats' median; its P99 may instead be taken
    over the repeats' requests pooled: `repeats_p99`)."""
    if not isinstance(raw, dict):
        raise InvalidField("replay", "must be an object")
    known = {
        "selection",
        "sample_size",
        "sample_seed",
        "top_n",
        "arrival",
        "duration_s",
        "qps",
        "qps_ladder",
        "repeats",
        "repeats_p99",
    }
    unknown = set(raw) - known
    if unknown:
        raise InvalidField(f"replay.{sorted(unknown)[0]}", "unknown key")
    selection = raw.get("selection", ReplayRun.Selection.ALL)
    if selection not in ReplayRun.Selection.values:
        raise InvalidField("replay.selection", f"must be one of {', '.join(ReplayRun.Selection.values)}")
    arrival = raw.get("arrival", ReplayRun.Arrival.POISSON)
    if arrival not in ReplayRun.Arrival.values:
        raise InvalidField("replay.arrival", f"must be one of {', '.join(ReplayRun.Arrival.values)}")
    spec = {
        "selection": selection,
        "arrival": arrival,
        "duration_s": _whole("replay.duration_s", raw.get("duration_s", 30), 1, MAX_TRIAL_DURATION_S),
        "repeats": _whole("replay.repeats", raw.get("repeats", 1), 1, MAX_REPEATS),
        "repeats_p99": raw.get("repeats_p99", search.REPEATS_P99[0]),
    }
    if spec["repeats_p99"] not in search.REPEATS_P99:
        raise InvalidField("replay.repeats_p99", f"must be one of {', '.join(search.REPEATS_P99)}")
    if selection == ReplayRun.Selection.SAMPLE:
        spec["sample_size"] = _whole("replay.sample_size", raw.get("sample_size"), 1, settings.REPLAY_MAX_REQUESTS)
        spec["sample_seed"] = _whole("replay.sample_seed", raw.get("sample_seed", 0), -(2**62), 2**62)
    if selection == ReplayRun.Selection.TOP:
        spec["top_n"] = _whole("replay.top_n", raw.get("top_n"), 1, settings.REPLAY_MAX_REQUESTS)
    if objective == search.Objective.MAX_QPS:
        ladder = raw.get("qps_ladder")
        if not isinstance(ladder, list) or not 2 <= len(ladder) <= MAX_LADDER:
            raise InvalidField("replay.qps_ladder", f"max_qps needs a ladder of 2 to {MAX_LADDER} QPS steps")
        ladder = [_qps(f"replay.qps_ladder[{i}]", q) for i, q in enumerate(ladder)]
        if any(b <= a for a, b in itertools.pairwise(ladder)):
            raise InvalidField("replay.qps_ladder", "must go up, lowest first")
        if "qps" in raw:
            raise InvalidField("replay.qps", "max_qps uses qps_ladder; leave qps out")
        spec["qps_ladder"] = ladder
    else:
        if "qps_ladder" in raw:
            raise InvalidField("replay.qps_ladder", "only max_qps uses a ladder; give qps")
        if raw.get("qps") is None:
            raise InvalidField("replay.qps", "required: the QPS every trial replays at")
        spec["qps"] = _qps("replay.qps", raw["qps"])
    return spec


def _check_corners(base: TemplateVersion, dims: list[search.Dimension]) -> None:
    """Each range's ends must make a valid document with the base (cross-field rules such as batch.min_size <=
    batch.max_size), so a study is not refused trial after trial; an error names the dimension."""
    for i, dim in enumerate(dims):
        ends = dim.choices if dim.type == "choice" else (dim.low, dim.high)
        for value in ends:
            params = search.candidate_params(base.params, {dim.path: value})
            try:
                document_validate(document={ROOT: params})
            except DocumentInvalid as exc:
                problem = "; ".join(f"{e.path}: {e.message}" for e in exc.errors)[:500]
                raise InvalidField(f"space[{i}]", f"{dim.path} = {value!r} with the base version: {problem}") from None


def _snapshot(study: TuningStudy) -> dict:
    return {
        "pool": study.pool.name,
        "base_version": str(study.base_version),
        "space": study.space,
        "objective": study.objective,
        "constraints": study.constraints,
        "sampler": study.sampler,
        "seed": study.seed,
        "budget": study.budget,
        "replay": {"log": study.log.name, **study.replay_spec},
        "status": study.status,
    }


@mutating_service
def study_create(
    *,
    actor,
    pool: Pool,
    base_version: TemplateVersion,
    log,
    space: list,
    objective: str,
    replay: dict,
    budget: int,
    reason: str,
    constraints: dict | None = None,
    sampler: str = TuningStudy.Sampler.TPE,
    seed: int = 0,
    label: str = "",
) -> TuningStudy:
    """Queue a study of `space` around `base_version` on the non-production `pool`; it starts once committed.

    A production pool is refused for everyone, admins included: a study publishes each of its candidates."""
    if not actor.can(Action.TUNING_RUN):
        raise Forbidden("only an SRE or admin may run a tuning study (each trial publishes to the pool)")
    reason = required_text("reason", reason)
    if pool.is_production:
        raise InvalidField(
            "pool",
            f"{pool.name} is a production pool: a tuning study publishes every candidate, so it never runs there",
        )
    if not pool.nodes.exists():
        raise InvalidField("pool", f"{pool.name} has no nodes to replay against")
    if log is None:
        raise InvalidField("log", "required: the conversation log every trial replays")
    if not isinstance(label, str) or len(label) > 200:
        raise InvalidField("label", "must be text of at most 200 characters")
    if objective not in search.Objective.ALL:
        raise InvalidField("objective", f"must be one of {', '.join(search.Objective.ALL)}; got {objective!r}")
    if sampler not in TuningStudy.Sampler.values:
        raise InvalidField("sampler", f"must be one of {', '.join(TuningStudy.Sampler.values)}; got {sampler!r}")
    dims = search.space_check(space, sampler=sampler)
    replay_spec = replay_spec_check(replay, objective=objective)
    limits = search.constraints_check(
        constraints, default_p99_s=P99_TARGET_S, default_error_rate=DEFAULT_ERROR_RATE_MAX
    )
    budget = _whole("budget", budget, 1, settings.TUNING_MAX_TRIALS)
    seed = _whole("seed", seed, -(2**62), 2**62 - MAX_REPEATS)  # repeat r replays with seed + r
    _check_corners(base_version, dims)
    with transaction.atomic():
        locked = Pool.objects.select_for_update().get(pk=pool.pk)
        running = TuningStudy.objects.filter(pool=locked, status__in=TuningStudy.ACTIVE).first()
        if running is not None:
            raise Conflict(f"pool: {running} is already tuning {locked.name}; cancel it or wait for it")
        study = TuningStudy.objects.create(
            label=label.strip(),
            pool=locked,
            base_version=base_version,
            pool_version_before=locked.desired_version,
            space=[d.as_dict() for d in dims],
            objective=objective,
            constraints=limits.as_dict(),
            sampler=sampler,
            seed=seed,
            budget=budget,
            replay_spec=replay_spec,
            log=log,
            reason=reason,
            created_by=actor,
        )
        audit_record(actor=actor, action="tuning.create", target=study, after=_snapshot(study), reason=reason)
        transaction.on_commit(lambda: _enqueue(study.pk))
    return study


def _enqueue(study_id: int) -> None:
    """Hand a queued study to a worker; in embedded mode (eager Celery) to a daemon thread of this process.

    Eager tasks run inside the caller, and a study lasts minutes: the HTTP request that queued it must not wait."""
    background.start(
        "controlplane.tuning.tasks.study_run_task",
        study_id,
        name=f"tuning-{study_id}",
        queue=settings.TUNING_TASK_QUEUE,
    )


@mutating_service
def study_cancel(*, actor, study: TuningStudy, reason: str) -> TuningStudy:
    """Stop a study: a queued one at once; a running one cancels its replay within seconds and runs no more trials."""
    if not actor.can(Action.TUNING_RUN):
        raise Forbidden("only an SRE or admin may cancel a tuning study")
    return run_cancel(
        model=TuningStudy,
        pk=study.pk,
        actor=actor,
        reason=reason,
        action="tuning.cancel",
        describe=str,
        progress=_progress,
        audit=audit_record,
    )


def _progress(study_id: int) -> None:
    study_progress(study_id)
