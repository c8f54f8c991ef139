"""Background work of alerting: the periodic evaluation pass and the webhook deliveries."""

import logging
import time

from celery import shared_task
from django.db import InterfaceError, OperationalError

from controlplane.alerts.evaluation import evaluate_claimed
from controlplane.alerts.notifications import WebhookFailed, notification_send
from controlplane.lib.background import runs_here

logger = logging.getLogger(__name__)

# Webhook retries: 2, 4, 8, 16, 32 s apart (about a minute in all), then the row keeps its last error. A database
# locked past its busy timeout, or gone, is retried the same way: the delivery is idempotent (a sent one is a no-op).
MAX_RETRIES = 5
BACKOFF_S = 2
RETRIED = (WebhookFailed, OperationalError, InterfaceError)


@shared_task(ignore_result=True, acks_late=False)
def alerts_evaluate() -> dict:
    """One evaluation pass, if no other worker is running one (see evaluate_claimed)."""
    report = evaluate_claimed()
    if report.claimed and (report.events or report.notifications):
        logger.info(
            "alerts: %s events, %s notifications, %s queries, %.0f ms",
            report.events,
            report.notifications,
            report.queries,
            report.duration_ms,
        )
    return {"claimed": report.claimed, "queries": report.queries, "duration_ms": report.duration_ms}


@shared_task(
    bind=True,
    ignore_result=True,
    acks_late=True,
    autoretry_for=RETRIED,
    max_retries=MAX_RETRIES,
    retry_backoff=BACKOFF_S,
    retry_jitter=False,
)
def alert_notification_send(self, notification_id: int) -> None:
    """POST one queued webhook message; a vanished or already-sent one is a no-op."""
    notification_send(notification_id=notification_id)


# The evaluation pass starts deliveries by name (controlplane/alerts/evaluation.py); eagerly, on their own thread,
# this runs instead of the task.
@runs_here("controlplane.alerts.tasks.alert_notification_send")
def _send_here(notification_id: int) -> None:
    # Eager Celery retries at once, without the backoff: the waits between tries are kept here instead.
    for attempt in range(MAX_RETRIES + 1):
        try:
            notification_send(notification_id=notification_id)
            return
        except RETRIED:
            if attempt == MAX_RETRIES:
                logger.error("alert webhook: notification %s not delivered, giving up", notification_id)
                return
            time.sleep(BACKOFF_S * 2**attempt)
