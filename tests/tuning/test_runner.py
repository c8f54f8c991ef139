"""A study's run against a pool whose node never answers: each candidate is saved and published with the study as the
reason, each trial fails naming why, the study says no trial was measured, and the pool goes back to its version; a
study whose worker stopped is failed by the reaper, and a worker that comes back late does not undo that."""

import threading
from datetime import timedelta

import pytest
from django.utils import timezone

from controlplane.audit.models import AuditEntry
from controlplane.nodes.models import Pool
from controlplane.nodes.services.pools import pool_publish
from controlplane.params.models import TemplateVersion
from controlplane.tuning.models import TuningStudy, TuningTrial
from controlplane.tuning.runner import study_run, tuning_studies_reap
from controlplane.tuning.services import study_create
from tests.engine_node.fleet import wait_until
from tests.tuning.conftest import study_args

pytestmark = pytest.mark.django_db


def test_trials_whose_nodes_never_ack_fail_and_the_pool_returns_to_its_version(tuning_world, sre, settings):
    settings.TUNING_APPLY_TIMEOUT_S = 1
    study = study_create(actor=sre, **study_args(tuning_world, budget=2, sampler="grid", seed=4))
    study_run(study.pk)
    study.refresh_from_db()
    assert study.status == "failed" and study.trials_done == 2 and study.best_trial is None
    assert study.error.startswith("no trial was measured; the last: 0 of 0 connected nodes ran the candidate")
    trials = list(study.trials.order_by("number"))
    assert [t.state for t in trials] == ["failed", "failed"]
    for trial in trials:
        version = trial.version
        assert version.template == tuning_world["template"] and version.author == sre
        assert version.params["engine"]["max_num_seqs"] == trial.params["engine.max_num_seqs"]
        # The base version's other fields are kept.
        assert version.params["temperature"]["strict"] == 0.2
        assert version.comment.startswith(f"study {study.pk} trial {trial.number} (from chat v2)")
    assert len({t.params["engine.max_num_seqs"] for t in trials}) == 2
    publishes = AuditEntry.objects.filter(action="pool.publish").order_by("id")
    reasons = [e.reason for e in publishes]
    assert reasons[-3:] == [
        f"study {study.pk} trial 1: find max_num_seqs for the festival",
        f"study {study.pk} trial 2: find max_num_seqs for the festival",
        f"study {study.pk} ended: back to chat v1",
    ]
    assert Pool.objects.get(name="staging").desired_version == tuning_world["v1"]
    # Production was never touched.
    assert Pool.objects.get(name="prod-main").desired_version is None
    assert TemplateVersion.objects.filter(template=tuning_world["template"]).count() == 4


def test_a_claimed_study_is_not_run_twice(tuning_world, sre):
    study = study_create(actor=sre, **study_args(tuning_world))
    TuningStudy.objects.filter(pk=study.pk).update(status="cancelled")
    study_run(study.pk)
    assert not study.trials.exists()


def _trial_on_the_pool(world, study, sre) -> TuningTrial:
    """What a worker leaves when it dies mid-trial: the candidate published to the pool and the trial running."""
    pool_publish(actor=sre, pool=world["staging"], version=world["v2"], reason=f"{study} trial 1: x")
    return TuningTrial.objects.create(study=study, number=1, params={"engine.max_num_seqs": 16}, version=world["v2"])


def test_a_study_whose_worker_stopped_is_failed_with_its_trial_and_the_pool_goes_back(tuning_world, sre, api_for):
    """A worker killed mid-study (or the embedded process restarted) left the study "running" for ever, holding its
    pool (one active study per pool) on a candidate version."""
    stalled = study_create(actor=sre, **study_args(tuning_world))
    trial = _trial_on_the_pool(tuning_world, stalled, sre)
    now = timezone.now()
    TuningStudy.objects.filter(pk=stalled.pk).update(
        status="running", started_at=now - timedelta(seconds=400), progress_at=now - timedelta(seconds=301)
    )

    def another(status: str, progress_s: float | None) -> TuningStudy:
        # The service keeps one active study per pool; these stand for studies of other pools.
        study = TuningStudy.objects.get(pk=stalled.pk)
        study.pk, study.status, study.started_at = None, status, now - timedelta(seconds=400)
        study.progress_at = None if progress_s is None else now - timedelta(seconds=progress_s)
        study.save()
        return study

    fresh = another("running", 299)
    cancelling = another("cancelling", 301)
    claimed_before_progress_was_written = another("running", None)

    reaped = tuning_studies_reap(now=now)
    assert sorted(reaped) == sorted([stalled.pk, cancelling.pk, claimed_before_progress_was_written.pk])
    detail = api_for("oncall").get(f"/api/v1/tuning-studies/{stalled.pk}/").json()
    assert detail["status"] == "failed" and detail["finished_at"] is not None
    assert detail["error"].startswith("no progress for 300 s: the worker running it stopped")
    assert [t["state"] for t in detail["trials"]] == ["failed"]
    assert detail["trials"][0]["error"] == "the study's worker stopped during this trial"
    assert TuningTrial.objects.get(pk=trial.pk).finished_at is not None
    # The pool runs what it ran before the study, published with the study as the reason.
    assert Pool.objects.get(name="staging").desired_version == tuning_world["v1"]
    assert AuditEntry.objects.filter(action="pool.publish").latest("id").reason == f"{stalled} ended: back to chat v1"
    # A cancel that never finished ends cancelled; a study heard from within the stall is left alone.
    assert TuningStudy.objects.get(pk=cancelling.pk).status == "cancelled"
    assert TuningStudy.objects.get(pk=claimed_before_progress_was_written.pk).status == "failed"
    assert TuningStudy.objects.get(pk=fresh.pk).status == "running"
    assert tuning_studies_reap(now=now) == []
    # The pool is free for a new study.
    TuningStudy.objects.filter(pk=fresh.pk).update(status="failed")
    assert study_create(actor=sre, **study_args(tuning_world)).status == "queued"


def test_the_stall_is_a_setting(tuning_world, sre, settings):
    settings.TUNING_STALL_S = 60
    study = study_create(actor=sre, **study_args(tuning_world))
    now = timezone.now()
    TuningStudy.objects.filter(pk=study.pk).update(status="running", progress_at=now - timedelta(seconds=59))
    assert tuning_studies_reap(now=now) == []
    assert tuning_studies_reap(now=now + timedelta(seconds=2)) == [study.pk]
    assert TuningStudy.objects.get(pk=study.pk).error.startswith("no progress for 60 s")


@pytest.mark.django_db(transaction=True)
def test_a_worker_that_was_only_slow_stops_at_once_and_leaves_the_failure_as_the_reaper_wrote_it(
    tuning_world, sre, settings
):
    """The reaper cannot tell a dead worker from a frozen one. One that wakes up must not run further trials,
    overwrite the study's or the trial's failure, nor publish to the pool again."""
    settings.TUNING_APPLY_TIMEOUT_S = 120  # the node never ACKs: trial 1 waits in its apply
    study = study_create(actor=sre, **study_args(tuning_world, budget=3))  # its worker starts once committed
    wait_until(
        lambda: study.trials.filter(state="running", version__desired_by__name="staging").exists(),
        30,
        "trial 1 published and waiting for its ACK",
    )
    running = TuningStudy.objects.get(pk=study.pk)
    assert running.status == "running" and running.progress_at is not None
    assert tuning_studies_reap() == []  # it writes progress while it waits
    assert tuning_studies_reap(now=timezone.now() + timedelta(seconds=settings.TUNING_STALL_S + 1)) == [study.pk]
    publishes = AuditEntry.objects.filter(action="pool.publish").count()
    # The worker sees it within a poll and ends; its own end (cancelled) is not stored over the failure.
    wait_until(lambda: not _study_threads(study.pk), 30, "the study's worker to end")
    study.refresh_from_db()
    assert study.status == "failed" and study.error.startswith("no progress for")
    assert list(study.trials.values_list("state", "error")) == [
        ("failed", "the study's worker stopped during this trial")
    ]
    assert AuditEntry.objects.filter(action="pool.publish").count() == publishes
    assert Pool.objects.get(name="staging").desired_version == tuning_world["v1"]


def _study_threads(study_id: int) -> list:
    return [t for t in threading.enumerate() if t.name == f"tuning-{study_id}" and t.is_alive()]
