"""Admission's queues and batches, and the window figures read from them: batch efficiency and the held time.

A WaitQueue holds the requests waiting for one kind of batch (short or long-context) with its running totals; a Batch
is one release to the engine, whose requests' service times give the seed's batch efficiency when its last one
finishes; HeldTime is the time requests waited although a slot was free for them (the time spent filling batches),
over a sliding window: the batch idle ratio.
"""

import collections
import math
import time

from engine_node import metrics

WINDOW_S = 60.0
_EFFICIENCY_SAMPLES = 10_000


class WaitQueue:
    __slots__ = (
        "admitted",
        "batches",
        "efficiencies",
        "in_flight",
        "name",
        "size_metric",
        "timer",
        "timer_at",
        "tokens",
        "wait_metric",
        "wait_sum",
        "waiters",
    )

    def __init__(self, name: str):
        self.name = name
        self.waiters: collections.deque = collections.deque()  # admission's tickets, oldest first
        self.tokens = 0  # sum of the waiting prompts' lengths: their average is tokens / len(waiters)
        self.in_flight = 0
        self.timer = None  # the batch timer (an asyncio.TimerHandle) while one is armed
        self.timer_at = 0.0
        self.batches = 0
        self.admitted = 0
        self.wait_sum = 0.0
        # (completed at, efficiency) per batch, pruned to the window when read.
        self.efficiencies: collections.deque[tuple[float, float]] = collections.deque(maxlen=_EFFICIENCY_SAMPLES)
        self.size_metric = metrics.BATCH_SIZE.labels(queue=name)
        self.wait_metric = metrics.QUEUE_WAIT.labels(queue=name)

    def figures(self, efficiency: float) -> dict:
        """The queue's part of admission's snapshot: instant depth and in flight, running totals, the window's
        efficiency (NaN: no batch completed in it)."""
        return {
            "depth": len(self.waiters),
            "in_flight": self.in_flight,
            "batches": self.batches,
            "admitted": self.admitted,
            "mean_batch_size": self.admitted / self.batches if self.batches else None,
            "mean_wait_s": self.wait_sum / self.admitted if self.admitted else None,
            "efficiency": None if math.isnan(efficiency) else efficiency,
        }


class Batch:
    __slots__ = ("bound", "queue", "remaining", "service_max", "service_sum", "size")

    def __init__(self, queue: WaitQueue, bound: int, size: int):
        self.queue = queue
        self.bound = bound
        self.size = size
        self.remaining = size
        self.service_sum = 0.0
        self.service_max = 0.0

    def efficiency(self) -> float:
        """Seed: efficiency = compute time / (largest batch x single-request time), once every request finished."""
        denominator = self.bound * self.service_max
        return self.service_sum / denominator if denominator > 0 else self.size / self.bound


def window_efficiency(queues, horizon: float) -> float:
    """Mean efficiency of the queues' batches completed after `horizon` (NaN when there were none)."""
    samples = []
    for queue in queues:
        while queue.efficiencies and queue.efficiencies[0][0] < horizon:
            queue.efficiencies.popleft()
        samples += [value for _, value in queue.efficiencies]
    return math.fsum(samples) / len(samples) if samples else math.nan


class HeldTime:
    """The spans in which requests were held although a slot was free, over the last `window_s`."""

    __slots__ = ("_clock", "_created_at", "_since", "_spans", "_window_s")

    def __init__(self, window_s: float, clock=time.monotonic):
        self._window_s = window_s
        self._clock = clock
        self._created_at = clock()
        self._since: float | None = None
        self._spans: collections.deque[tuple[float, float]] = collections.deque()

    def set(self, is_held: bool) -> None:
        """Called on every change of admission's state; reads the clock only when the held state flips."""
        if is_held == (self._since is not None):
            return
        now = self._clock()
        if is_held:
            self._since = now
        else:
            self._spans.append((self._since, now))
            self._since = None
            horizon = now - self._window_s
            while self._spans and self._spans[0][1] <= horizon:
                self._spans.popleft()

    def ratio(self) -> float:
        """Share of the last window (or of the time since creation, when shorter) spent held."""
        now = self._clock()
        horizon = now - self._window_s
        while self._spans and self._spans[0][1] <= horizon:
            self._spans.popleft()
        held = sum(end - max(start, horizon) for start, end in self._spans)
        if self._since is not None:
            held += now - max(self._since, horizon)
        span = min(self._window_s, now - self._created_at)
        return held / span if span > 0 else 0.0
