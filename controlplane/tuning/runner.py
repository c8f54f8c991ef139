"""A study's run: ask the optimiser for a candidate, save it as a version, publish it to the study's non-production pool
(audited with the study as the reason), wait for the nodes' ACKs (and warm-up after a cold change), replay, score.

Runs inside one Celery task (tasks.py). The pool goes back to the version it ran before the study when the study ends.
A running study writes `progress_at` at least every PROGRESS_EVERY_S; one silent for TUNING_STALL_S (its worker was
killed, or the embedded process restarted) is failed by `tuning_studies_reap` (a beat entry), which restores the pool.
"""

import logging
import time
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from controlplane.lib.errors import DomainError
from controlplane.nodes.models import EngineNode, Pool, Rollout
from controlplane.nodes.services import rollouts
from controlplane.nodes.services.pools import pool_publish
from controlplane.params.exceptions import StaleBaseVersion
from controlplane.params.models import ParameterTemplate, TemplateVersion
from controlplane.params.schema import ROOT
from controlplane.params.services.templates import template_version_create
from controlplane.replays.figure_selectors import run_records
from controlplane.replays.figures import run_figures
from controlplane.replays.models import ReplayRun
from controlplane.replays.services import replay_run_cancel, replay_run_create
from controlplane.tuning import space as search
from controlplane.tuning.models import TuningStudy, TuningTrial
from controlplane.tuning.optimiser import Optimiser
from controlplane.tuning.realtime import study_progress

logger = logging.getLogger(__name__)
POLL_S = 0.25
CANCEL_WAIT_S = 15
# How often a running study writes `progress_at` (its sign of life for the reaper): far below TUNING_STALL_S.
PROGRESS_EVERY_S = 10.0
STALLED_TRIAL = "the study's worker stopped during this trial"
_last_beat: dict[int, float] = {}  # study id -> when this process last wrote its progress_at (monotonic)


class TrialFailed(Exception):
    """The candidate could not be measured; the message says why."""


class StudyCancelled(Exception):
    """Someone cancelled the study while a trial ran, or the reaper failed it meanwhile."""


def dimensions(study: TuningStudy) -> list[search.Dimension]:
    return [
        search.Dimension(
            path=d["path"],
            type=d["type"],
            apply=d["apply"],
            low=d.get("low"),
            high=d.get("high"),
            step=d.get("step"),
            log=d.get("log", False),
            choices=tuple(d.get("choices", ())),
        )
        for d in study.space
    ]


def _beat(study_id: int) -> None:
    """Write the study's sign of life, at most every PROGRESS_EVERY_S."""
    now = time.monotonic()
    if now - _last_beat.get(study_id, -PROGRESS_EVERY_S) >= PROGRESS_EVERY_S:
        _last_beat[study_id] = now
        TuningStudy.objects.filter(pk=study_id, status=TuningStudy.Status.RUNNING).update(progress_at=timezone.now())


def _cancelled(study_id: int) -> bool:
    """Whether the study must stop: cancelled, or no longer running at all (the reaper failed it as stalled). Every
    wait of the run asks this a few times a second, so it also writes the study's sign of life."""
    _beat(study_id)
    return not TuningStudy.objects.filter(pk=study_id, status=TuningStudy.Status.RUNNING).exists()


def _history(study: TuningStudy) -> list[dict]:
    return list(study.trials.exclude(state=TuningTrial.State.RUNNING).values("params", "value", "is_feasible", "state"))


def study_run(study_id: int) -> None:
    """Run a queued study to its end (budget spent, grid exhausted, cancelled or failed); a claimed one is a no-op."""
    now = timezone.now()
    claimed = TuningStudy.objects.filter(pk=study_id, status=TuningStudy.Status.QUEUED).update(
        status=TuningStudy.Status.RUNNING, started_at=now, progress_at=now
    )
    if not claimed:
        return
    _last_beat[study_id] = time.monotonic()
    study = TuningStudy.objects.select_related("pool", "base_version__template", "log", "created_by").get(pk=study_id)
    study_progress(study_id)
    status, error = TuningStudy.Status.SUCCEEDED, ""
    try:
        optimiser = Optimiser(objective=study.objective, sampler=study.sampler, dims=dimensions(study), seed=study.seed)
        history = _history(study)
        optimiser.replay_history(history)
        # Measured points, the latest measurement of each: a point the sampler proposes again is not replayed again.
        measured_points = {
            optimiser.point(t["params"]): (t["value"], t["is_feasible"])
            for t in history
            if t["state"] == TuningTrial.State.COMPLETE and t["value"] is not None
        }
        while study.trials.count() < study.budget and not optimiser.is_exhausted():
            if _cancelled(study_id):
                raise StudyCancelled
            ask, values = optimiser.ask_unmeasured(measured_points)
            trial = TuningTrial.objects.create(study=study, number=study.trials.count() + 1, params=values)
            study_progress(study_id)
            try:
                trial_run(study, trial)
            except StudyCancelled:
                _end_trial(trial, state=TuningTrial.State.CANCELLED, error="the study was cancelled")
                raise
            optimiser.tell(ask, value=trial.value if trial.state == "complete" else None, is_feasible=trial.is_feasible)
            if trial.state == TuningTrial.State.COMPLETE and trial.value is not None:
                measured_points[optimiser.point(values)] = (trial.value, trial.is_feasible)
            _record_progress(study)
        measured = study.trials.filter(state=TuningTrial.State.COMPLETE).exists()
        if not measured and study.trials.exists():
            last = study.trials.order_by("-number").first()
            status, error = TuningStudy.Status.FAILED, f"no trial was measured; the last: {last.error}"[:2000]
    except StudyCancelled:
        status = TuningStudy.Status.CANCELLED
    except Exception as exc:
        logger.exception("tuning study %s failed", study_id)
        status, error = TuningStudy.Status.FAILED, str(exc)[:2000] or type(exc).__name__
    finally:
        _last_beat.pop(study_id, None)
        _restore_pool(study)
        _record_progress(study)
        _finish(study_id, status, error)


def _finish(study_id: int, status: str, error: str) -> None:
    """Store the study's end, only while it is running or cancelling: one the reaper failed stays failed."""
    active = (TuningStudy.Status.RUNNING, TuningStudy.Status.CANCELLING)
    with transaction.atomic():
        current = TuningStudy.objects.select_for_update().filter(pk=study_id).values_list("status", flat=True).first()
        if current not in active:
            logger.warning("study %s ended after it was failed as stalled; its end (%s) is kept out", study_id, status)
            return
        if current == TuningStudy.Status.CANCELLING:
            status = TuningStudy.Status.CANCELLED
        TuningStudy.objects.filter(pk=study_id).update(status=status, error=error, finished_at=timezone.now())
    study_progress(study_id)


def tuning_studies_reap(*, now=None) -> list[int]:
    """Fail running studies (a cancelling one ends cancelled) that wrote no sign of life for TUNING_STALL_S: their
    worker stopped, so they would show "running" for ever and hold their pool (one active study per pool). The trial
    under way is failed too, and the pool goes back to the version it ran before the study. Returns their ids."""
    now = now or timezone.now()
    stall = settings.TUNING_STALL_S
    cutoff = now - timedelta(seconds=stall)
    active = (TuningStudy.Status.RUNNING, TuningStudy.Status.CANCELLING)
    # A study claimed before progress_at existed counts from its start.
    silent = Q(progress_at__lt=cutoff) | Q(progress_at__isnull=True, started_at__lt=cutoff)
    stale = list(TuningStudy.objects.filter(silent, status__in=active).values_list("pk", "status"))
    reaped = []
    for study_id, status in stale:
        error = f"no progress for {stall} s: the worker running it stopped (restarted or killed); start a new study"
        end = TuningStudy.Status.CANCELLED if status == TuningStudy.Status.CANCELLING else TuningStudy.Status.FAILED
        with transaction.atomic():
            ended = TuningStudy.objects.filter(silent, pk=study_id, status=status).update(
                status=end, error=error if end == TuningStudy.Status.FAILED else "", finished_at=now
            )
            if ended:
                TuningTrial.objects.filter(study_id=study_id, state=TuningTrial.State.RUNNING).update(
                    state=TuningTrial.State.FAILED, error=STALLED_TRIAL, finished_at=now
                )
        if not ended:
            continue
        reaped.append(study_id)
        study = TuningStudy.objects.select_related("pool", "pool_version_before", "created_by").get(pk=study_id)
        _restore_pool(study)
        _record_progress(study)
    return reaped


def _record_progress(study: TuningStudy) -> None:
    trials = list(study.trials.values("id", "value", "is_feasible", "number"))
    best = search.best_trial(study.objective, trials)
    done = study.trials.exclude(state=TuningTrial.State.RUNNING).count()
    TuningStudy.objects.filter(pk=study.pk).update(trials_done=done, best_trial_id=best["id"] if best else None)
    study_progress(study.pk)


def _end_trial(trial: TuningTrial, *, state: str, error: str = "") -> None:
    """End a running trial (one the reaper failed keeps the reaper's reason)."""
    trial.state, trial.error, trial.finished_at = state, error[:2000], timezone.now()
    TuningTrial.objects.filter(pk=trial.pk, state=TuningTrial.State.RUNNING).update(
        state=trial.state, error=trial.error, finished_at=trial.finished_at
    )


def trial_run(study: TuningStudy, trial: TuningTrial) -> None:
    """Measure one candidate; a candidate that cannot be measured ends the trial failed, not the study."""
    try:
        version = _save_candidate(study, trial)
        trial.version = version
        trial.save(update_fields=["version"])
        _apply(study, version, trial)
        _measure(study, trial)
    except TrialFailed as exc:
        _end_trial(trial, state=TuningTrial.State.FAILED, error=str(exc))


def _save_candidate(study: TuningStudy, trial: TuningTrial) -> TemplateVersion:
    params = search.candidate_params(study.base_version.params, trial.params)
    changes = ", ".join(f"{path}={value}" for path, value in trial.params.items())
    comment = f"{study} trial {trial.number} (from {study.base_version}): {changes}"
    template = study.base_version.template
    for _ in range(3):  # a person may save a version of the same template meanwhile; the base is the study's anyway
        latest = ParameterTemplate.objects.get(pk=template.pk).latest_number
        try:
            return template_version_create(
                actor=study.created_by, template=template, document={ROOT: params}, base_number=latest, comment=comment
            )
        except StaleBaseVersion:
            continue
        except DomainError as exc:
            raise TrialFailed(f"the candidate is not a valid version: {exc.message}") from None
    raise TrialFailed("the template kept changing while the candidate was saved")


def _publish(study: TuningStudy, version: TemplateVersion, reason: str) -> None:
    pool = Pool.objects.get(pk=study.pool_id)
    if pool.is_production:  # the pool's flag changed after the study was created: never publish there
        raise DomainError(f"pool: {pool.name} is now a production pool; the study stops")
    pool_publish(actor=study.created_by, pool=pool, version=version, reason=reason)
    # A study measures the candidate on the whole pool: a canary's stages are promoted at once (staging only).
    while (rollout := Rollout.objects.filter(pool=pool, state__in=Rollout.ACTIVE).first()) is not None:
        if set(rollout.canary_nodes) >= set(pool.nodes.values_list("name", flat=True)):
            break
        rollouts.rollout_promote(actor=study.created_by, rollout=rollout, reason=reason)


def _apply(study: TuningStudy, version: TemplateVersion, trial: TuningTrial) -> None:
    reason = f"{study} trial {trial.number}: {study.reason}"
    try:
        _publish(study, version, reason)
    except DomainError as exc:
        raise TrialFailed(f"publish to {study.pool.name} refused: {exc.message}") from None
    _wait_applied(study, version)


def _wait_applied(study: TuningStudy, version: TemplateVersion) -> None:
    """Until every connected node of the pool runs `version` and serves (a cold change restarts and warms up first),
    and the pool's rollout, if any, has ended."""
    deadline = time.monotonic() + settings.TUNING_APPLY_TIMEOUT_S
    content_hash = version.content_hash
    while True:
        if _cancelled(study.pk):
            raise StudyCancelled
        now = timezone.now()
        nodes = list(EngineNode.objects.filter(pool_id=study.pool_id, is_connected=True))
        nacked = [n for n in nodes if n.last_nack_hash == content_hash and n.last_nack_error]
        if nacked:
            raise TrialFailed(f"{nacked[0].name} refused the candidate (NACK): {nacked[0].last_nack_error[:300]}")
        ready = [n for n in nodes if n.applied_version_id == version.pk and n.status(now) == EngineNode.Status.ONLINE]
        if nodes and len(ready) == len(nodes):
            rollout = Rollout.objects.filter(pool_id=study.pool_id, state__in=Rollout.ACTIVE).first()
            if rollout is None:
                return
            rollouts.rollout_step(rollout_id=rollout.pk)
        if time.monotonic() > deadline:
            raise TrialFailed(
                f"{len(ready)} of {len(nodes)} connected nodes ran the candidate "
                f"after {settings.TUNING_APPLY_TIMEOUT_S} s"
            )
        time.sleep(POLL_S)


def _replay(study: TuningStudy, trial: TuningTrial, qps: float, repeat: int = 0) -> ReplayRun:
    """One replay of the trial's candidate; repeat r of k uses seed + r, so every trial sees the same k arrival
    schedules (a comparison between candidates is not a comparison between schedules)."""
    spec = study.replay_spec
    repeats = spec.get("repeats", 1)
    label = f"study {study.pk} trial {trial.number} @ {qps:g} QPS"
    if repeats > 1:
        label += f" (repeat {repeat + 1} of {repeats})"
    run = replay_run_create(
        actor=study.created_by,
        pool=study.pool,
        log=study.log,
        reason=f"{study} trial {trial.number}: {study.reason}",
        label=label,
        selection=spec["selection"],
        sample_size=spec.get("sample_size"),
        sample_seed=spec.get("sample_seed"),
        top_n=spec.get("top_n"),
        qps=qps,
        arrival=spec["arrival"],
        duration_cap_s=spec["duration_s"],
        seed=study.seed + repeat,
    )
    while True:
        run.refresh_from_db(fields=["status", "error"])
        if run.status in (ReplayRun.Status.CANCELLED, ReplayRun.Status.SUCCEEDED, ReplayRun.Status.FAILED):
            break
        if _cancelled(study.pk):
            cancelled_by = TuningStudy.objects.get(pk=study.pk).cancelled_by or study.created_by
            if run.status in (ReplayRun.Status.QUEUED, ReplayRun.Status.RUNNING):
                replay_run_cancel(actor=cancelled_by, run=run, reason=f"{study} was cancelled or stopped")
            # Its shares stop within a second; the pool goes back to its version only once nothing is sent.
            deadline = time.monotonic() + CANCEL_WAIT_S
            while (
                time.monotonic() < deadline
                and not ReplayRun.objects.filter(pk=run.pk, status__in=ReplayRun.FINISHED).exists()
            ):
                time.sleep(POLL_S)
            raise StudyCancelled
        time.sleep(POLL_S)
    if run.status != ReplayRun.Status.SUCCEEDED:
        raise TrialFailed(f"replay {run.pk} ended {run.status}: {run.error[:300]}")
    return run


def _measure(study: TuningStudy, trial: TuningTrial) -> None:
    constraints = search.Constraints(**study.constraints)
    spec = study.replay_spec
    ladder = spec.get("qps_ladder") or [spec["qps"]]
    steps, runs = [], {}
    for qps in ladder:
        each, records = [], []
        for repeat in range(spec.get("repeats", 1)):
            run = _replay(study, trial, qps, repeat)
            records.append(run_records(run=run))
            figures = search.measured(run_figures(records[-1], pool_metrics=run.pool_metrics))
            each.append({"run": run.pk, **figures})
            runs[run.pk] = run
        pooled = search.pooled_p99_of(records) if spec.get("repeats_p99") == "pooled" else None
        values = search.repeated([{k: v for k, v in one.items() if k != "run"} for one in each], pooled_p99=pooled)
        broken = search.violations(values, constraints)
        # "run" is the step's last replay; "repeats" holds every replay's own figures, each linked to its run.
        steps.append({"qps": qps, "run": run.pk, **values, "violations": broken, "repeats": each})
        trial.steps, trial.replay_run = steps, run
        trial.save(update_fields=["steps", "replay_run"])
        if broken:
            break
    # The trial's figures: its one replay, or on a ladder the highest step that met the constraints (else the first).
    kept = steps[-1]
    if study.objective == search.Objective.MAX_QPS:
        best = search.ladder_value(steps)
        kept = next(step for step in steps if step["qps"] == best) if best is not None else steps[0]
        value, feasible, broken = (best or 0.0), best is not None, kept["violations"]
    else:
        value = search.objective_value(study.objective, kept)
        broken = kept["violations"]
        feasible = not broken and value is not None
    last_run = runs[kept["run"]]
    last_values = {key: kept[key] for key in kept if key not in ("qps", "run", "violations", "repeats")}
    fields = {
        "value": value,
        "measured": last_values,
        "is_feasible": feasible,
        "violations": broken,
        "replay_run": last_run,
        "state": TuningTrial.State.COMPLETE if value is not None else TuningTrial.State.FAILED,
        "error": "" if value is not None else "the replay measured nothing",
        "finished_at": timezone.now(),
    }
    for name, field in fields.items():
        setattr(trial, name, field)
    # Only while it runs: a trial the reaper failed (its study stalled) stays failed.
    TuningTrial.objects.filter(pk=trial.pk, state=TuningTrial.State.RUNNING).update(**fields)


def _restore_pool(study: TuningStudy) -> None:
    """Publish the version the pool ran before the study again (it may be changed by a person meanwhile: leave it)."""
    before = study.pool_version_before
    pool = Pool.objects.get(pk=study.pool_id)
    trial_versions = set(study.trials.exclude(version=None).values_list("version_id", flat=True))
    if before is None or pool.desired_version_id == before.pk or pool.desired_version_id not in trial_versions:
        return
    try:
        _finish_rollout(study, pool)
        pool_publish(actor=study.created_by, pool=pool, version=before, reason=f"{study} ended: back to {before}")
    except DomainError as exc:
        logger.warning("%s could not restore %s on %s: %s", study, before, pool.name, exc.message)


def _finish_rollout(study: TuningStudy, pool: Pool) -> None:
    rollout = Rollout.objects.filter(pool=pool, state__in=Rollout.ACTIVE).first()
    if rollout is not None:
        rollouts.rollout_abort(actor=study.created_by, rollout=rollout, reason=f"{study} ended")
