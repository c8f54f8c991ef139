"""Background work of tuning studies: one task runs a whole study, trial after trial."""

from celery import shared_task

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
