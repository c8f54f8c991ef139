"""Background work of conversation logs: the analysis run."""

from celery import shared_task

from controlplane.convlogs.services.analyses import log_analyses_reap, log_analysis_run
from controlplane.lib.background import CLAIM_RETRIED


# A database locked past its busy timeout, or gone, when the run claims its analysis: tried again (the claim is a
# conditional UPDATE, so an analysis another worker claimed meanwhile is a no-op). Errors mark the analysis failed.
@shared_task(**CLAIM_RETRIED)
def log_analysis_task(analysis_id: int) -> None:
    """Run one queued analysis; a vanished or already-claimed analysis is a no-op (see log_analysis_run)."""
    log_analysis_run(analysis_id=analysis_id)


@shared_task
def log_analyses_reap_task() -> None:
    """Fail running analyses whose worker stopped reporting progress (settings.CELERY_BEAT_SCHEDULE)."""
    log_analyses_reap()
