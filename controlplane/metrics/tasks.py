"""Periodic upkeep of metric history (registered in settings.CELERY_BEAT_SCHEDULE): the minute rollup and retention."""

import logging

from celery import shared_task

from controlplane.metrics.services.history import metric_samples_expire, metric_samples_roll_up

log = logging.getLogger(__name__)


@shared_task(ignore_result=True)
def metrics_roll_up_task() -> None:
    written = metric_samples_roll_up()
    if written:
        log.debug("metrics: wrote %d minute rows", written)


@shared_task(ignore_result=True)
def metrics_expire_task() -> None:
    deleted = metric_samples_expire()
    if any(deleted.values()):
        # Every minute once the history is an hour old: routine, not something to read in the log.
        log.debug("metrics: expired %s rows (by resolution in seconds)", deleted)
