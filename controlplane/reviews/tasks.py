"""Upkeep of the review queue (settings.CELERY_BEAT_SCHEDULE): pending messages nobody sent again expire."""

import logging

from celery import shared_task

from controlplane.reviews.services import review_items_expire

log = logging.getLogger(__name__)


@shared_task(ignore_result=True)
def review_items_expire_task() -> None:
    deleted = review_items_expire()
    if deleted:
        log.info("reviews: %d pending messages expired (not sampled again within the retention)", deleted)
