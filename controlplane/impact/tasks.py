"""Background work of impact records: measuring the ones whose after-window has passed (CELERY_BEAT_SCHEDULE)."""

from celery import shared_task

from controlplane.impact.services import impact_records_measure_due


@shared_task(ignore_result=True, acks_late=False)
def impact_records_measure_task() -> int:
    """Measure every pending record whose after-window has passed; each under its row lock (skip_locked, so two
    workers never measure the same record)."""
    return impact_records_measure_due()
