"""Audited writes to replay runs: start one (refused on production without an SRE's override), cancel one."""

import itertools
import math
import re

from django.conf import settings
from django.db import transaction

from controlplane.accounts.roles import Action
from controlplane.audit.services import audit_record, mutating_service
from controlplane.lib import background
from controlplane.lib.errors import SLUG_PATTERN, SLUG_RULE, Forbidden, InvalidField, optional_text, required_text
from controlplane.lib.runs import run_cancel
from controlplane.nodes.models import EngineNode, Pool
from controlplane.replays.models import ReplayRun
from controlplane.replays.realtime import replay_progress
from controlplane.replays.sustained import MAX_LADDER_STEPS, SLO_P99_S

MAX_LABEL = 200
MAX_NODES = 256
# A ladder's P99 line: up to ten minutes, enough for engines far slower than the report's.
MAX_SLO_P99_S = 600.0


def _positive_int(field: str, value, *, maximum: int, required: bool = True) -> int | None:
    if value is None:
        if required:
            raise InvalidField(field, "required")
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidField(field, f"must be a whole number, got {value!r}")
    if not 1 <= value <= maximum:
        raise InvalidField(field, f"must be between 1 and {maximum}, got {value}")
    return value


def _number(field: str, value, *, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidField(field, f"must be a number, got {value!r}")
    if not low <= value <= high:
        raise InvalidField(field, f"must be between {low:g} and {high:g}, got {value:g}")
    return float(value)


def _choice(field: str, value, choices) -> str:
    if value not in choices.values:
        raise InvalidField(field, f"must be one of {', '.join(choices.values)}; got {value!r}")
    return value


def _checked_nodes(pool: Pool, nodes) -> list[str]:
    if nodes is None:
        return []
    if not isinstance(nodes, list | tuple) or not all(isinstance(name, str) for name in nodes):
        raise InvalidField("nodes", "must be a list of node names")
    if len(nodes) > MAX_NODES:
        raise InvalidField("nodes", f"at most {MAX_NODES} nodes")
    for name in nodes:
        if not re.fullmatch(SLUG_PATTERN, name):
            raise InvalidField("nodes", f"{name[:64]!r} is not a node name ({SLUG_RULE})")
    if len(set(nodes)) != len(nodes):
        raise InvalidField("nodes", "a node is named twice")
    in_pool = set(EngineNode.objects.filter(pool=pool, name__in=nodes).values_list("name", flat=True))
    outside = [name for name in nodes if name not in in_pool]
    if outside:
        raise InvalidField("nodes", f"not nodes of pool {pool.name}: {', '.join(sorted(outside)[:10])}")
    return list(nodes)


def _snapshot(run: ReplayRun) -> dict:
    return {
        "pool": run.pool.name,
        "nodes": run.nodes,
        "log": run.log_name,
        "label": run.label,
        "selection": run.selection,
        "sample_size": run.sample_size,
        "sample_seed": run.sample_seed,
        "top_n": run.top_n,
        "pacing": run.pacing,
        "qps": run.qps,
        "qps_steps": run.qps_steps,
        "step_s": run.step_s,
        "slo_p99_s": run.slo_p99_s,
        "arrival": run.arrival,
        "time_scale": run.time_scale,
        "duration_cap_s": run.duration_cap_s,
        "status": run.status,
    }


@mutating_service
def replay_run_create(
    *,
    actor,
    pool: Pool,
    log,
    reason: str,
    selection: str = ReplayRun.Selection.ALL,
    sample_size: int | None = None,
    sample_seed: int | None = None,
    top_n: int | None = None,
    pacing: str = ReplayRun.Pacing.QPS,
    qps: float | None = None,
    qps_steps: list[float] | None = None,
    step_s: int | None = None,
    slo_p99_s: float | None = None,
    arrival: str = ReplayRun.Arrival.POISSON,
    time_scale: float | None = None,
    turn_gap_s: float = 5.0,
    duration_cap_s: int = 300,
    nodes: list[str] | None = None,
    label: str = "",
    stream: bool = True,
    seed: int = 0,
    production_override_reason: str = "",
) -> ReplayRun:
    """Queue a replay of `log` against `pool` (or some of its nodes); it starts once committed (tasks.py)."""
    reason = required_text("reason", reason)
    if not isinstance(label, str) or len(label) > MAX_LABEL:
        raise InvalidField("label", f"must be text of at most {MAX_LABEL} characters")
    if log is None:
        raise InvalidField("log", "required: the conversation log to replay")
    selection = _choice("selection", selection, ReplayRun.Selection)
    if selection == ReplayRun.Selection.SAMPLE:
        sample_size = _positive_int("sample_size", sample_size, maximum=settings.REPLAY_MAX_REQUESTS)
        if sample_seed is None:
            sample_seed = 0
        if isinstance(sample_seed, bool) or not isinstance(sample_seed, int) or abs(sample_seed) > 2**62:
            raise InvalidField("sample_seed", f"must be a whole number, got {sample_seed!r}")
    else:
        sample_size = sample_seed = None
    top_n = _positive_int("top_n", top_n, maximum=settings.REPLAY_MAX_REQUESTS) if selection == "top" else None
    pacing = _choice("pacing", pacing, ReplayRun.Pacing)
    if pacing == ReplayRun.Pacing.LADDER:
        if qps is not None:
            raise InvalidField("qps", "pacing ladder replays at qps_steps; leave qps out")
        qps_steps, step_s = _ladder(qps_steps, step_s)
        slo_p99_s = SLO_P99_S if slo_p99_s is None else _number("slo_p99_s", slo_p99_s, low=0.001, high=MAX_SLO_P99_S)
        duration_cap_s = len(qps_steps) * step_s
        arrival = _choice("arrival", arrival, ReplayRun.Arrival)
        qps = time_scale = None
    elif qps_steps or step_s is not None:
        raise InvalidField("qps_steps", "only pacing ladder takes steps; leave qps_steps and step_s out")
    elif slo_p99_s is not None:
        raise InvalidField("slo_p99_s", "only pacing ladder judges its steps against a P99 line; leave it out")
    elif pacing == ReplayRun.Pacing.QPS:
        if qps is None:
            raise InvalidField("qps", "required with pacing qps")
        qps = _number("qps", qps, low=0.01, high=settings.REPLAY_MAX_QPS)
        arrival = _choice("arrival", arrival, ReplayRun.Arrival)
        time_scale = None
    else:
        # The log's pace times 1/time_scale must stay under the QPS cap too; checked on the plan when the run starts.
        time_scale = _number("time_scale", 1.0 if time_scale is None else time_scale, low=0.001, high=1000)
        qps = None
    turn_gap_s = _number("turn_gap_s", turn_gap_s, low=0, high=3600)
    duration_cap_s = _positive_int("duration_cap_s", duration_cap_s, maximum=settings.REPLAY_MAX_DURATION_S)
    if qps is not None and qps * duration_cap_s > settings.REPLAY_MAX_REQUESTS * 1.05:
        raise InvalidField(
            "duration_cap_s",
            f"{qps:g} QPS for {duration_cap_s} s is about {qps * duration_cap_s:.0f} requests; "
            f"a run sends at most {settings.REPLAY_MAX_REQUESTS}",
        )
    if qps_steps and sum(qps_steps) * step_s > settings.REPLAY_MAX_REQUESTS * 1.05:
        raise InvalidField(
            "qps_steps",
            f"{len(qps_steps)} steps of {step_s} s are about {sum(qps_steps) * step_s:.0f} requests; "
            f"a run sends at most {settings.REPLAY_MAX_REQUESTS}",
        )
    if isinstance(seed, bool) or not isinstance(seed, int) or abs(seed) > 2**62:
        raise InvalidField("seed", f"must be a whole number, got {seed!r}")
    node_names = _checked_nodes(pool, nodes)
    override = optional_text("production_override_reason", production_override_reason)
    if pool.is_production:
        if not override:
            raise InvalidField(
                "pool",
                f"{pool.name} is a production pool: replays run against non-production pools (an SRE or admin may "
                "override with production_override_reason)",
            )
        if not actor.can(Action.PRODUCTION_OVERRIDE):
            raise Forbidden("production_override_reason: only an SRE or admin may replay against a production pool")
    elif override:
        raise InvalidField("production_override_reason", f"{pool.name} is not a production pool; leave it empty")
    with transaction.atomic():
        run = ReplayRun.objects.create(
            pool=pool,
            nodes=node_names,
            log_name=log.name,
            label=label.strip(),
            selection=selection,
            sample_size=sample_size,
            sample_seed=sample_seed,
            top_n=top_n,
            pacing=pacing,
            qps=qps,
            qps_steps=qps_steps or [],
            step_s=step_s,
            slo_p99_s=slo_p99_s,
            arrival=arrival,
            time_scale=time_scale,
            turn_gap_s=turn_gap_s,
            duration_cap_s=duration_cap_s,
            stream=bool(stream),
            seed=seed,
            created_by=actor,
            reason=reason,
            production_override_by=actor if override else None,
            production_override_reason=override,
            log=log,
        )
        after = _snapshot(run)
        if override:
            after["production_override"] = True
            audit_record(actor=actor, action="replay.production_override", target=run, after=after, reason=override)
        else:
            audit_record(actor=actor, action="replay.create", target=run, after=after, reason=reason)
        transaction.on_commit(lambda: _enqueue(run.pk))
    return run


def _ladder(qps_steps, step_s) -> tuple[list[float], int]:
    """A ladder's steps (2 to MAX_LADDER_STEPS QPS values going up) and seconds per step, or the field at fault."""
    if not isinstance(qps_steps, list | tuple) or not 2 <= len(qps_steps) <= MAX_LADDER_STEPS:
        raise InvalidField("qps_steps", f"pacing ladder needs a list of 2 to {MAX_LADDER_STEPS} QPS steps")
    steps = [_number(f"qps_steps[{i}]", q, low=0.01, high=settings.REPLAY_MAX_QPS) for i, q in enumerate(qps_steps)]
    if any(b <= a for a, b in itertools.pairwise(steps)):
        raise InvalidField("qps_steps", "must go up, lowest first")
    if step_s is None:
        raise InvalidField("step_s", "required with pacing ladder: seconds each step lasts")
    step_s = _positive_int("step_s", step_s, maximum=settings.REPLAY_MAX_DURATION_S // len(steps))
    return steps, step_s


def _enqueue(run_id: int) -> None:
    """Hand a queued run to a worker; in embedded mode (eager Celery) to a daemon thread of this process.

    Eager tasks run inside the caller, and a run lasts minutes: the HTTP request that queued it must not wait.
    """
    background.start(
        "controlplane.replays.tasks.replay_start_task",
        run_id,
        name=f"replay-{run_id}-start",
        queue=settings.REPLAY_TASK_QUEUE,
    )


@mutating_service
def replay_run_cancel(*, actor, run: ReplayRun, reason: str) -> ReplayRun:
    """Ask a queued or running run to stop: its shares stop sending within a second; rows so far are kept."""
    return run_cancel(
        model=ReplayRun,
        pk=run.pk,
        actor=actor,
        reason=reason,
        action="replay.cancel",
        describe=lambda locked: f"replay {locked.pk}",
        progress=_progress,
        audit=audit_record,
    )


def _progress(run_id: int) -> None:
    replay_progress(run_id)
