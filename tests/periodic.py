"""A control-plane pass run every half second in a thread, as the beat schedule or `run_periodic` would run it."""

import threading

from django.db import connection


class Periodic:
    """`with Periodic(rollouts_analyse) as analyser:` runs the pass until the block ends; a pass that raises is kept in
    `errors` (the exception's repr) for the test to report, never swallowed, and the loop goes on."""

    def __init__(self, run, every_s: float = 0.5):
        self._run = run
        self._every_s = every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self.errors: list[str] = []

    def _loop(self) -> None:
        try:
            while not self._stop.is_set():
                try:
                    self._run()
                except Exception as exc:  # reported by the test, in its own thread
                    self.errors.append(repr(exc))
                self._stop.wait(self._every_s)
        finally:
            connection.close()

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=30)
