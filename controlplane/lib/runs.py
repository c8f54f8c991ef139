"""Long runs a person may cancel (replay runs, tuning studies): their shared statuses and the audited cancel."""

from collections.abc import Callable

from django.db import models, transaction
from django.utils import timezone

from controlplane.lib.errors import Conflict, required_text


class RunStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    CANCELLING = "cancelling"
    CANCELLED = "cancelled"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


class CancellableRun:
    """Mixin of a model with a `status` of RunStatus, a `finished_at` and a `cancelled_by`."""

    Status = RunStatus
    ACTIVE = (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.CANCELLING)
    FINISHED = (RunStatus.CANCELLED, RunStatus.SUCCEEDED, RunStatus.FAILED)

    @property
    def is_active(self) -> bool:
        return self.status in self.ACTIVE


def run_cancel(
    *,
    model: type[models.Model],
    pk: int,
    actor,
    reason: str,
    action: str,
    describe: Callable[[models.Model], str],
    progress: Callable[[int], None],
    audit: Callable[..., object],
):
    """Cancel a queued run at once, or ask a running one to stop (cancelling); audited as `action`.

    `describe` names the run in the conflict errors; `progress(pk)` runs once the change is committed; `audit` is
    the audit log's `audit_record`, called in the same transaction (the caller's app hands it over: lib imports no
    app).
    """
    reason = required_text("reason", reason)
    with transaction.atomic():
        locked = model.objects.select_for_update().get(pk=pk)
        if not locked.is_active:
            raise Conflict(f"status: {describe(locked)} is already {locked.status}")
        if locked.status == RunStatus.CANCELLING:
            raise Conflict(f"status: {describe(locked)} is already being cancelled")
        before = locked.status
        if locked.status == RunStatus.QUEUED:
            # Nothing was started yet: the task that would start it finds it cancelled and does nothing.
            locked.status = RunStatus.CANCELLED
            locked.finished_at = timezone.now()
        else:
            locked.status = RunStatus.CANCELLING
        locked.cancelled_by = actor
        locked.save(update_fields=["status", "finished_at", "cancelled_by"])
        audit(
            actor=actor,
            action=action,
            target=locked,
            before={"status": before},
            after={"status": locked.status},
            reason=reason,
        )
        transaction.on_commit(lambda: progress(locked.pk))
    return locked
