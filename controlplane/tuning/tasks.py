"""Background work of tuning studies: one task runs a whole study, trial after trial."""

from celery import shared_task
from django.conf import settings

from controlplane.lib.background import enqueue
from controlplane.tuning.runner import study_run, tuning_studies_reap


# Not retried: a study publishes and replays; the claim (queued -> running) makes a second delivery a no-op.
@shared_task(acks_late=True, ignore_result=True)
def study_run_task(study_id: int) -> None:
    """Run one queued study to its end; a vanished, claimed or cancelled study is a no-op."""
    study_run(study_id)


@shared_task(ignore_result=True)
def tuning_studies_reap_task() -> None:
    """Fail running studies whose worker stopped writing progress (settings.CELERY_BEAT_SCHEDULE)."""
    tuning_studies_reap()


def study_run_enqueue(study_id: int) -> None:
    """Hand a queued study to a worker; in embedded mode (eager Celery) to a daemon thread of this process.

    Eager tasks run inside the caller, and a study lasts minutes: the HTTP request that queued it must not wait."""
    enqueue(study_run_task, study_id, name=f"tuning-{study_id}", queue=settings.TUNING_TASK_QUEUE)
