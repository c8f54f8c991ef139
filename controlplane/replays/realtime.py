"""Events about replay runs: progress of one run to its page, and to the run list."""

from typing import TypedDict

from controlplane.lib import realtime
from controlplane.replays.models import ReplayRun


def replay_group(run_id: int) -> str:
    """Browsers watching one replay run's page."""
    return f"replay.{run_id}"


def replays_group() -> str:
    """Browsers watching the list of replay runs."""
    return "replays"


class ReplayProgress(TypedDict):
    type: str  # "replay.progress": ReplayEventsConsumer.replay_progress
    run_id: int
    status: str
    planned: int
    sent: int
    done: int
    errors: int
    achieved_qps: float | None
    asked_qps: float | None
    p99_s: float | None
    error: str


def progress_event(run: ReplayRun) -> ReplayProgress:
    return {
        "type": "replay.progress",
        "run_id": run.pk,
        "status": run.status,
        "planned": run.planned,
        "sent": run.sent,
        "done": run.done,
        "errors": run.errors,
        "achieved_qps": run.achieved_qps,
        "asked_qps": run.asked_qps,
        "p99_s": run.p99_s,
        "error": run.error,
    }


def replay_progress(run_id: int) -> None:
    run = ReplayRun.objects.filter(pk=run_id).first()
    if run is not None:
        realtime.send([replay_group(run_id), replays_group()], progress_event(run))
