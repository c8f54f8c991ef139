"""Background work of the operations app: the automatic degradation pass."""

import logging

from celery import shared_task

from controlplane.operations.degradation import degradation_evaluate

logger = logging.getLogger(__name__)


@shared_task(ignore_result=True, acks_late=False)
def degradation_evaluate_task() -> int:
    """One pass of automatic degradation over every pool; transitions are logged, audited and pushed."""
    events = degradation_evaluate()
    for event in events:
        logger.info("degradation: %s %s (%s): %s", event.pool.name, event.kind, event.cause, event.reason)
    return len(events)
