"""Background work of replay runs: the start (nodes, plan, key) and one task per share of the load."""

from celery import shared_task
from django.conf import settings

from controlplane.lib.background import CLAIM_RETRIED, enqueue
from controlplane.replays.lifecycle import replay_runs_reap, replay_start
from controlplane.replays.shares import replay_share


# A database gone when the start claims its run: tried again (the claim is a conditional UPDATE, so a run another
# worker claimed meanwhile is a no-op). Everything after the claim ends the run failed with the reason instead.
@shared_task(**CLAIM_RETRIED)
def replay_start_task(run_id: int) -> None:
    """Start one queued run and hand its shares out; a vanished, claimed or cancelled run is a no-op."""
    for share in replay_start(run_id):
        replay_share_enqueue(*share)


# Not retried: a share sends open loop on the run's clock; a second attempt would send its requests twice.
@shared_task(ignore_result=True)
def replay_share_task(run_id: int, index: int, key: str) -> None:
    """Send one share of a running run (each share on its own worker: they run for the run's whole duration)."""
    replay_share(run_id, index, key)


@shared_task(ignore_result=True)
def replay_runs_reap_task() -> None:
    """End runs whose shares never reported their end (settings.CELERY_BEAT_SCHEDULE)."""
    replay_runs_reap()


def replay_share_enqueue(run_id: int, index: int, key: str) -> None:
    enqueue(
        replay_share_task, run_id, index, key, name=f"replay-{run_id}-share-{index}", queue=settings.REPLAY_TASK_QUEUE
    )
