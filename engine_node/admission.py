"""The gate in front of the engine: counts requests in flight, closes for a drain, reopens after a restart.

While closed, a new request waits (bounded by the queue timeout) for the gate to reopen, then gets 503
with Retry-After: never an unbounded wait, never a reset connection.
"""

import asyncio
import contextlib
import time


class GateClosed(Exception):
    """The gate stayed closed for the whole queue timeout."""

    def __init__(self, retry_after_s: int):
        super().__init__(f"engine unavailable; retry after {retry_after_s}s")
        self.retry_after_s = retry_after_s


class Admission:
    def __init__(self, queue_timeout_s: float):
        self.queue_timeout_s = queue_timeout_s
        self.in_flight = 0
        self.waiting = 0
        self._open = asyncio.Event()
        self._open.set()
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def is_open(self) -> bool:
        return self._open.is_set()

    @contextlib.asynccontextmanager
    async def admitted(self):
        if not self._open.is_set():
            self.waiting += 1
            try:
                await asyncio.wait_for(self._open.wait(), self.queue_timeout_s)
            except TimeoutError:
                raise GateClosed(retry_after_s=max(1, int(self.queue_timeout_s))) from None
            finally:
                self.waiting -= 1
        self.in_flight += 1
        self._idle.clear()
        try:
            yield
        finally:
            self.in_flight -= 1
            if self.in_flight == 0:
                self._idle.set()

    async def drain(self, timeout_s: float) -> tuple[bool, float]:
        """Close the gate and wait for in-flight requests; return (all finished, seconds waited)."""
        self._open.clear()
        started = time.monotonic()
        try:
            await asyncio.wait_for(self._idle.wait(), timeout_s)
            return True, time.monotonic() - started
        except TimeoutError:
            return False, time.monotonic() - started

    def resume(self) -> None:
        self._open.set()
