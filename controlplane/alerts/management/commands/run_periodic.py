"""Run every CELERY_BEAT_SCHEDULE entry in this process at its period: embedded mode's Celery beat and worker.

Without Redis the channel layer lives in one process's memory, so events sent by periodic work (alerts firing,
metric aggregates) reach browsers only from inside the server's process: `--serve HOST:PORT` starts daphne
here, with the schedule in threads beside it. That is how `scripts/run.sh` starts embedded mode.

An entry's thread never dies of its task: a failure (a locked or unreachable database, a bug) is recorded in the
loop's health record (`controlplane/lib/loop_health.py`: logged once, shown on the overview and `/healthz`) and the
entry runs again after a backoff. A run that succeeds logs nothing; the task logs what a person should read.
"""

import logging
import threading
import time
from datetime import timedelta

from celery.schedules import schedule as celery_schedule
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import close_old_connections, connections

from controlplane.celery import app
from controlplane.lib import loop_health

log = logging.getLogger("controlplane.periodic")
# How long a stop waits for the periodic runs in progress (an alert pass takes well under a second).
JOIN_TIMEOUT_S = 10.0

# After a failure an entry waits its period doubled per failure in a row, up to this (or its period if longer):
# a locked database gets room to drain instead of a retry every second, and a recovery shows within half a minute.
MAX_BACKOFF_S = 30.0


class Entry:
    """One schedule entry: its task and how many seconds until it is due again."""

    def __init__(self, name: str, spec: dict):
        self.name = name
        self.task_name = spec["task"]
        self.args = tuple(spec.get("args", ()))
        self.kwargs = dict(spec.get("kwargs", {}))
        every = spec["schedule"]
        if isinstance(every, int | float):
            self.period_s, self.schedule = float(every), None
        elif isinstance(every, timedelta):
            self.period_s, self.schedule = every.total_seconds(), None
        else:  # a celery schedule (crontab, solar, ...): ask it when it is due
            self.period_s, self.schedule = None, every
        if self.period_s is not None and self.period_s <= 0:
            raise CommandError(f"{name}: schedule must be positive, got {every!r}")
        self.last_run_at = None
        self.failures = 0

    def task(self):
        try:
            return app.tasks[self.task_name]
        except KeyError:
            raise CommandError(f"{self.name}: no task named {self.task_name!r}") from None

    @property
    def description(self) -> str:
        return f"every {self.period_s:g} s" if self.period_s else str(self.schedule)

    def run(self) -> bool:
        """Run the task once in this thread; True when it succeeded (a failure is recorded and logged, never raised).

        A plain call of the task, not `apply()`: eager Celery would log a line for every run (several a second) and a
        traceback for every failure; the health record logs a failure once and its recovery.
        """
        loop_health.loop_running(self.name)
        try:
            self.task()(*self.args, **self.kwargs)
        except Exception as exc:
            loop_health.loop_failed(self.name, exc, context=f"periodic task {self.task_name}")
            self.failures += 1
            return False
        loop_health.loop_succeeded(self.name)
        self.failures = 0
        return True

    def backoff_s(self) -> float:
        """Extra wait after failures in a row (0 after a success)."""
        if not self.failures:
            return 0.0
        period = self.period_s or 1.0
        return min(period * 2**self.failures, max(MAX_BACKOFF_S, period))

    def seconds_until_due(self, last_started: float) -> float:
        if self.schedule is None:
            return max(0.0, last_started + self.period_s - time.monotonic())
        if isinstance(self.schedule, celery_schedule) and self.schedule.app is None:
            self.schedule.app = app
        _, next_s = self.schedule.is_due(self.last_run_at) if self.last_run_at else (True, 0.0)
        return max(0.0, float(next_s))


def entries_from_settings(only: list[str] | None = None) -> list[Entry]:
    beat = settings.CELERY_BEAT_SCHEDULE
    unknown = sorted(set(only or ()) - set(beat))
    if unknown:
        raise CommandError(f"no CELERY_BEAT_SCHEDULE entry named {', '.join(unknown)}; known: {', '.join(beat)}")
    app.loader.import_default_modules()  # registers every app's tasks.py
    entries = [Entry(name, spec) for name, spec in beat.items() if not only or name in only]
    for entry in entries:
        entry.task()
    return entries


def run_forever(entry: Entry, stop: threading.Event) -> None:
    """Run at a fixed rate; a run longer than the period skips the ticks it overran instead of piling up.

    Failures back off (`Entry.backoff_s`); the loop ends only when `stop` is set, and an end for any other reason
    (an error outside the task) is recorded as the loop stopping, never a silent dead thread.
    """
    from django.utils import timezone

    loop_health.loop_register(entry.name, description=entry.description, period_s=entry.period_s)
    try:
        while not stop.is_set():
            started = time.monotonic()
            entry.last_run_at = timezone.now()
            try:
                close_old_connections()
                entry.run()
            finally:
                # A connection a failed run left in a broken transaction must not poison the next run.
                _close_connections()
            stop.wait(max(entry.seconds_until_due(started), entry.backoff_s()))
    except BaseException as exc:
        loop_health.loop_stopped(entry.name, exc)
        raise
    finally:
        _close_connections()


def _close_connections() -> None:
    try:
        close_old_connections()
    except Exception:
        connections.close_all()


class Command(BaseCommand):
    help = "Run every CELERY_BEAT_SCHEDULE entry in this process at its period (embedded mode: no worker, no beat)."

    def add_arguments(self, parser):
        parser.add_argument("--once", action="store_true", help="run each entry once, in order, then exit")
        parser.add_argument("--only", action="append", metavar="NAME", help="run only this entry (repeatable)")
        parser.add_argument(
            "--serve", metavar="HOST:PORT", help="also serve controlplane.asgi with daphne in this process"
        )

    def handle(self, *args, once=False, only=None, serve=None, **options):
        entries = entries_from_settings(only)
        if once:
            failed = [e.name for e in entries if not e.run()]
            if failed:
                raise CommandError(f"failed: {', '.join(failed)}")
            self.stdout.write(f"ran {', '.join(e.name for e in entries)}")
            return
        stop = threading.Event()
        threads = [
            threading.Thread(target=run_forever, args=(entry, stop), name=f"periodic-{entry.name}", daemon=True)
            for entry in entries
        ]
        for thread in threads:
            thread.start()
        log.info(
            "periodic (in this process; failures are logged once and shown on /healthz): %s",
            ", ".join(f"{e.name} {e.description}" for e in entries),
        )
        try:
            if serve:
                self._serve(serve)
            else:
                while not stop.wait(3600):
                    pass
        except KeyboardInterrupt:
            pass
        finally:
            stop.set()
            # Let a run in progress finish: a thread still inside SQLite while the interpreter exits can crash it.
            deadline = time.monotonic() + JOIN_TIMEOUT_S
            for thread in threads:
                thread.join(max(0.0, deadline - time.monotonic()))

    def _serve(self, address: str) -> None:
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise CommandError(f"--serve: expected HOST:PORT, got {address!r}")
        from daphne.cli import CommandLineInterface

        CommandLineInterface().run(["--bind", host, "--port", port, "controlplane.asgi:application"])
