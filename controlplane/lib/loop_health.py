"""Health of the control plane's background loops: periodic entries, the agents' consumer, its batchers, ingestion.

Each loop reports its runs here. A failure is logged once, with its context and traceback; while the loop keeps
failing, at most one reminder a minute (with how many failures it stands for); and one line when it recovers. The
records are what the overview page, `/healthz` and `/metrics` show, so a loop that keeps failing is visible instead of
a quiet thread.

Records are keyed by (process, loop) and hold only plain values, so that a shared store (for example a Redis hash per
process that expires with it) can later carry every process's records to whichever process renders the page. Today
each process shows its own records, which in embedded mode (`make run`: one process) are all of them.
"""

import logging
import os
import socket
import threading
import time
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum

from django.utils import timezone

log = logging.getLogger("controlplane.loops")

# A loop failing on every run logs a reminder at most this often; its first failure and its recovery always show.
REMIND_EVERY_S = 60.0
# A periodic loop with no run started for this many periods (and at least STALL_MIN_S) counts as stalled.
STALL_PERIODS = 3
STALL_MIN_S = 30.0
MAX_ERROR_LENGTH = 500


class LoopState(StrEnum):
    OK = "ok"
    FAILING = "failing"
    STALLED = "stalled"
    STOPPED = "stopped"


@dataclass
class LoopHealth:
    """One loop of one process: when it last ran, succeeded and failed, and how many failures in a row."""

    process: str
    loop: str
    description: str
    period_s: float | None
    started_at: datetime
    last_run_at: datetime | None = None
    last_success_at: datetime | None = None
    last_error_at: datetime | None = None
    last_error: str = ""
    failures: int = 0
    failing_since: datetime | None = None
    stopped_at: datetime | None = None

    def state(self, now: datetime) -> LoopState:
        if self.stopped_at is not None:
            return LoopState.STOPPED
        if self.failures:
            return LoopState.FAILING
        if self.period_s is not None:
            heard = self.last_run_at or self.started_at
            if (now - heard).total_seconds() > max(STALL_PERIODS * self.period_s, STALL_MIN_S):
                return LoopState.STALLED
        return LoopState.OK

    def as_dict(self, now: datetime, *, with_error: bool) -> dict:
        document = {
            "loop": self.loop,
            "process": self.process,
            "state": self.state(now).value,
            "description": self.description,
            "period_s": self.period_s,
            "started_at": _iso(self.started_at),
            "last_run_at": _iso(self.last_run_at),
            "last_success_at": _iso(self.last_success_at),
            "last_error_at": _iso(self.last_error_at),
            "failures": self.failures,
        }
        if with_error:
            document["last_error"] = self.last_error
        return document


@dataclass
class _LogState:
    logged_at: float = -REMIND_EVERY_S
    unlogged: int = 0
    streak_logged: bool = False


_lock = threading.Lock()
_records: dict[tuple[str, str], LoopHealth] = {}
_logs: dict[tuple[str, str], _LogState] = {}


def process_name() -> str:
    """This process, as it names its records: host and pid."""
    return f"{socket.gethostname()}:{os.getpid()}"


def loop_register(loop: str, *, description: str, period_s: float | None = None) -> None:
    """A loop starting (or starting again) in this process; its record begins afresh."""
    key = (process_name(), loop)
    with _lock:
        _records[key] = LoopHealth(
            process=key[0], loop=loop, description=description, period_s=period_s, started_at=timezone.now()
        )
        _logs[key] = _LogState()


def loop_running(loop: str) -> None:
    """A run of the loop starts (periodic loops: what stall detection watches)."""
    with _lock:
        record = _record(loop)
        record.last_run_at = timezone.now()


def loop_succeeded(loop: str) -> None:
    """A run, flush or message of the loop went through; after failures this is the recovery, logged once."""
    with _lock:
        record = _record(loop)
        now = timezone.now()
        record.last_success_at = now
        if not record.failures:
            return
        failures, since, error = record.failures, record.failing_since, record.last_error
        record.failures, record.failing_since = 0, None
        state = _logs[(record.process, loop)]
        logged, state.streak_logged, state.unlogged = state.streak_logged, False, 0
    if logged:
        took = (now - since).total_seconds() if since else 0.0
        log.info("%s recovered after %d failure(s) over %.0f s (last error: %s)", loop, failures, took, error)


def loop_failed(loop: str, error: BaseException, *, context: str) -> None:
    """A run of the loop failed; `context` says what it was doing (which node, which operation)."""
    text = f"{context}: {type(error).__name__}: {error}"[:MAX_ERROR_LENGTH]
    with _lock:
        record = _record(loop)
        now = timezone.now()
        record.failures += 1
        record.failing_since = record.failing_since or now
        record.last_error_at, record.last_error = now, text
        state = _logs[(record.process, loop)]
        due = time.monotonic() - state.logged_at >= REMIND_EVERY_S
        if not due:
            state.unlogged += 1
            return
        first = not state.streak_logged
        also, state.unlogged = state.unlogged, 0
        state.logged_at, state.streak_logged = time.monotonic(), True
        failures = record.failures
    more = f" ({also} more failure(s) since the last line)" if also else ""
    if first:
        log.error("%s failed (%s)%s", loop, context, more, exc_info=error)
    else:
        log.warning("%s still failing: %d failure(s) in a row; last: %s%s", loop, failures, text, more)


def loop_stopped(loop: str, error: BaseException | None = None) -> None:
    """The loop ended while the process goes on: shown as stopped, never a silent dead thread."""
    with _lock:
        record = _record(loop)
        record.stopped_at = timezone.now()
        if error is not None:
            record.last_error_at = record.stopped_at
            record.last_error = f"stopped: {type(error).__name__}: {error}"[:MAX_ERROR_LENGTH]
    log.error("%s stopped", loop, exc_info=error)


def loops_health() -> list[LoopHealth]:
    """Copies of this process's records, by loop name."""
    with _lock:
        return [replace(record) for _, record in sorted(_records.items())]


def loops_report(now: datetime | None = None, *, with_error: bool = False) -> dict:
    """`{status, process, loops}`: status "ok" when every loop is, else "failing"."""
    now = now or timezone.now()
    loops = [record.as_dict(now, with_error=with_error) for record in loops_health()]
    healthy = all(loop["state"] == LoopState.OK for loop in loops)
    return {"status": "ok" if healthy else "failing", "process": process_name(), "loops": loops}


def _record(loop: str) -> LoopHealth:
    """The caller holds `_lock`; a loop that reports before registering gets a record of its own."""
    key = (process_name(), loop)
    record = _records.get(key)
    if record is None:
        record = _records[key] = LoopHealth(
            process=key[0], loop=loop, description="", period_s=None, started_at=timezone.now()
        )
        _logs[key] = _LogState()
    return record


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None
