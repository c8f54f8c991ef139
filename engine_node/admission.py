"""The gate and batcher in front of the engine: queues requests, releases them in adaptive batches, drains.

Requests wait in one of two queues: short, or long-context (prompt above `batch.long_context_threshold`
tokens, the seed's separate queue for very long contexts). A dispatcher releases them to the engine in
batches sized by the seed's algorithm (section 3, get_batch_size) generalised to the template's `batch.*`
section, and bounds the requests in flight toward the engine. Nothing waits without bound: a full queue is
refused at once (QueueFull, 429) and a request that waits longer than the queue timeout gets QueueTimeout
(or GateClosed while a drain holds the gate shut), both 503 with Retry-After. While the agent warms the node up
the closed gate refuses at once instead (`refuse_while_closed`, Warming: 503 "warming up" with a short Retry-After).
"""

import asyncio
import collections
import math
import time

from engine_node import metrics
from engine_node.admission_queues import WINDOW_S, Batch, HeldTime, WaitQueue, window_efficiency
from engine_node.batching import (  # noqa: F401 - the refusals and batch figures are admission's API too
    DEFAULT_BATCH,
    DEFAULT_PARAMS,
    OVERDUE_TIMEOUTS,
    AdmissionRejected,
    BatchParams,
    GateClosed,
    QueueFull,
    QueueTimeout,
    Warming,
    target_batch_size,
)

# Default in-flight limits, as multiples of the batch bounds: room for a few batches at once, so the
# engine's continuous batching always has the next batch queued while one finishes.
IN_FLIGHT_PER_MAX_BATCH = 4
LONG_IN_FLIGHT_PER_MAX_BATCH = 2
# asyncio runs a timer up to its clock resolution early; a batch due within this is treated as due.
_DEADLINE_SLACK_S = 0.0005

_NEW, _QUEUED, _ADMITTED, _DONE = range(4)


class _Ticket:
    """One request's passage through admission; `async with` holds an engine slot for the body."""

    __slots__ = (
        "_admission",
        "batch",
        "enqueued_at",
        "future",
        "queue",
        "queued_at",
        "section",
        "started_at",
        "state",
        "timer",
        "tokens",
    )

    def __init__(self, admission: "Admission", tokens: int, section: dict | None):
        self._admission = admission
        self.tokens = tokens
        self.section = section
        self.state = _NEW

    async def __aenter__(self) -> None:
        admission = self._admission
        if not admission._try_start_at_once(self):
            await admission._enter(self)

    async def __aexit__(self, exc_type, exc, tb) -> None:
        self._admission._leave(self)


class Admission:
    """Counts requests in flight, batches the waiting ones, closes for a drain and reopens after a restart."""

    def __init__(
        self,
        queue_timeout_s: float,
        *,
        max_in_flight: int | None = None,
        long_max_in_flight: int | None = None,
        window_s: float = WINDOW_S,
        clock=time.monotonic,
    ):
        """`max_in_flight` bounds the requests released to the engine (default 4 x batch.max_size);
        `long_max_in_flight` is the long-context queue's share of them (default 2 x batch.long_context_max_size,
        always at least one slot short of max_in_flight). `clock` times the metrics; the waits use the loop's."""
        if max_in_flight is not None and max_in_flight < 2:
            raise ValueError("max_in_flight must leave room for a short and a long-context request")
        self.queue_timeout_s = queue_timeout_s
        self.in_flight = 0
        self._open = asyncio.Event()
        self._open.set()
        self._idle = asyncio.Event()
        self._idle.set()
        self._max_in_flight = max_in_flight
        self._long_max_in_flight = long_max_in_flight
        self._short = WaitQueue("short")
        self._long = WaitQueue("long")
        self._use_params(None)
        self._clock = clock
        self._window_s = window_s
        self._held = HeldTime(window_s, clock)
        self._rejections = {cls.reason: 0 for cls in (QueueFull, QueueTimeout, GateClosed, Warming)}
        # While set (and the gate is shut), the refusal requests get at once instead of waiting in the queue.
        self._closed_refusal = None
        self.recent_batches: collections.deque[tuple[str, int]] = collections.deque(maxlen=64)
        # Called with (queue name, size) for every batch released; the agent's telemetry keeps the window's sizes.
        self.on_batch = None
        # Called with (queue name, overdue released, refused after the queue timeout) when either is non-zero.
        self.on_batch_timeouts = None
        metrics.watch_admission(self)

    @property
    def is_open(self) -> bool:
        return self._open.is_set()

    @property
    def waiting(self) -> int:
        return len(self._short.waiters) + len(self._long.waiters)

    @property
    def admitted_total(self) -> int:
        """Requests released to the engine since the agent started."""
        return self._short.admitted + self._long.admitted

    def admitted(self, *, prompt_tokens: int = 0, batch: dict | None = None) -> _Ticket:
        """`async with admission.admitted(prompt_tokens=n, batch=params["batch"]):` forward one request.

        Raises QueueFull (answer 429) or GateClosed / its subclass QueueTimeout (answer 503), each with
        retry_after_s. `batch` is the live `batch.*` section; None means the schema defaults.
        """
        return _Ticket(self, prompt_tokens, batch)

    async def drain(self, timeout_s: float) -> tuple[bool, float]:
        """Close the gate and wait for in-flight requests; return (all finished, seconds waited).

        Waiting requests stay queued until resume() or their queue timeout.
        """
        self._open.clear()
        self._update_held()
        started = time.monotonic()
        try:
            await asyncio.wait_for(self._idle.wait(), timeout_s)
            return True, time.monotonic() - started
        except TimeoutError:
            return False, time.monotonic() - started

    def refuse_while_closed(self, refusal) -> None:
        """`refusal()` (an AdmissionRejected) answers every request at once while the gate is shut, those already
        waiting included; None goes back to queueing them. The agent sets it for the length of a warmup."""
        self._closed_refusal = refusal
        if refusal is None or self._open.is_set():
            return
        for queue in (self._short, self._long):
            while queue.waiters:
                ticket = queue.waiters[0]
                self._unqueue(ticket)
                if not ticket.future.done():
                    ticket.future.set_result(self._count_rejection(queue, refusal()))
        self._update_held()

    def resume(self) -> None:
        self._open.set()
        if self._short.waiters or self._long.waiters:
            self._dispatch()

    # Metrics, read by engine_node.metrics at scrape time and by the agent through snapshot().

    def queue_depth(self, name: str) -> int:
        return len(self._queue(name).waiters)

    def efficiency(self, name: str | None = None) -> float:
        """Mean batch efficiency over the batches completed in the last window (NaN when there were none)."""
        queues = (self._short, self._long) if name is None else (self._queue(name),)
        return window_efficiency(queues, self._clock() - self._window_s)

    def idle_ratio(self) -> float:
        """Share of the last window in which requests waited while the engine had a slot free for them."""
        return self._held.ratio()

    def snapshot(self) -> dict:
        """Instant figures (depth, in flight), window figures (efficiency, idle_ratio) and running totals."""
        queues = {}
        for queue in (self._short, self._long):
            efficiency = self.efficiency(queue.name)
            queues[queue.name] = queue.figures(efficiency)
        efficiency = self.efficiency()
        return {
            "open": self.is_open,
            "in_flight": self.in_flight,
            "waiting": self.waiting,
            "max_in_flight": self._limit,
            "long_max_in_flight": self._long_limit,
            "window_s": self._window_s,
            "queues": queues,
            "efficiency": None if math.isnan(efficiency) else efficiency,
            "idle_ratio": self.idle_ratio(),
            "rejections": dict(self._rejections),
        }

    # The request path.

    def _try_start_at_once(self, ticket: _Ticket) -> bool:
        params = self._params if ticket.section is self._params_source else self._use_params(ticket.section)
        queue = self._long if ticket.tokens > params.long_context_threshold else self._short
        ticket.queue = queue
        if self.in_flight or not self._open.is_set() or self._short.waiters or self._long.waiters:
            return False
        # An idle engine takes a request at once instead of after the batch timeout: nothing is running for
        # it to share a step with and no batch forms while the GPU sits unused, so the wait would be pure
        # latency. vLLM's continuous batching adds anything arriving later to this request's running batch
        # at its next step, so nothing is lost by starting now.
        self._start(queue, (ticket,), params, self._clock())
        queue.wait_metric.observe(0.0)
        return True

    async def _enter(self, ticket: _Ticket) -> None:
        params = self._params
        queue = ticket.queue
        if self._closed_refusal is not None and not self._open.is_set():
            raise self._count_rejection(queue, self._closed_refusal())
        limit = params.long_context_max_queue if queue is self._long else params.max_queue
        if len(queue.waiters) >= limit:
            raise self._count_rejection(queue, QueueFull(queue.name))
        loop = asyncio.get_running_loop()
        ticket.future = loop.create_future()
        ticket.enqueued_at = loop.time()
        ticket.queued_at = self._clock()
        ticket.timer = loop.call_later(self.queue_timeout_s, self._expire, ticket)
        ticket.state = _QUEUED
        queue.waiters.append(ticket)
        queue.tokens += ticket.tokens
        self._dispatch()
        try:
            refusal = await ticket.future
        except asyncio.CancelledError:
            # The client went away. Released already (before this task ran again): hand the slot back.
            if ticket.state == _ADMITTED:
                self._leave(ticket)
            elif ticket.state == _QUEUED:
                self._unqueue(ticket)
                self._dispatch()
            raise
        if refusal is not None:
            raise refusal

    def _leave(self, ticket: _Ticket) -> None:
        if ticket.state != _ADMITTED:
            return
        ticket.state = _DONE
        now = self._clock()
        queue = ticket.queue
        queue.in_flight -= 1
        self.in_flight -= 1
        batch = ticket.batch
        service = now - ticket.started_at
        batch.service_sum += service
        if service > batch.service_max:
            batch.service_max = service
        batch.remaining -= 1
        if batch.remaining == 0:
            queue.efficiencies.append((now, batch.efficiency()))
        if self.in_flight == 0:
            self._idle.set()
        if self._short.waiters or self._long.waiters:
            self._dispatch()

    def _expire(self, ticket: _Ticket) -> None:
        if ticket.state != _QUEUED:
            return
        queue = ticket.queue
        self._unqueue(ticket)
        retry_after = max(1, int(self.queue_timeout_s))
        refusal = QueueTimeout(retry_after) if self._open.is_set() else GateClosed(retry_after)
        if not ticket.future.done():  # not cancelled: the client is still there to be told
            ticket.future.set_result(self._count_rejection(queue, refusal))
        if self.on_batch_timeouts is not None:
            self.on_batch_timeouts(queue.name, 0, 1)
        self._dispatch()

    def _unqueue(self, ticket: _Ticket) -> None:
        queue = ticket.queue
        queue.waiters.remove(ticket)
        queue.tokens -= ticket.tokens
        ticket.state = _DONE
        ticket.timer.cancel()

    def _count_rejection(self, queue: WaitQueue, refusal: AdmissionRejected) -> AdmissionRejected:
        self._rejections[refusal.reason] += 1
        metrics.ADMISSION_REJECTIONS.labels(queue=queue.name, reason=refusal.reason).inc()
        return refusal

    # The dispatcher: runs on every change (arrival, finish, batch timer, timeout, cancel, resume).

    def _dispatch(self) -> None:
        if self._open.is_set():
            params = self._params
            loop = asyncio.get_running_loop()
            now = loop.time()
            timeout_s = params.timeout_ms / 1000
            is_idle = self.in_flight == 0
            reserved = 0
            # Long-context first: its in-flight share is capped below the total, so short requests always keep
            # slots; going first on every freed slot is what keeps long ones from starving behind short ones.
            for queue in (self._long, self._short):
                cap = self._long_limit if queue is self._long else self._limit
                largest = cap if queue is self._long else self._limit - self._long_limit
                first = True
                while queue.waiters:
                    pending = len(queue.waiters)
                    target = min(largest, self._target(queue, pending, params))
                    free_global = self._limit - self.in_flight - reserved
                    free = min(cap - queue.in_flight, free_global)
                    if pending >= target:
                        if free < target:
                            # A full batch waits for room rather than going out piecemeal; the engine is busy
                            # meanwhile. Slots the long batch waits for are not handed to short requests.
                            if queue is self._long and cap - queue.in_flight >= target:
                                reserved = max(0, free_global)
                            break
                        size = target
                    else:
                        deadline = queue.waiters[0].enqueued_at + timeout_s
                        is_due = (is_idle and first) or deadline <= now + _DEADLINE_SLACK_S
                        if not is_due or free <= 0:
                            break
                        size = min(pending, free)
                    self._release(queue, size, params)
                    first = False
                self._arm_batch_timer(queue, loop, now, timeout_s)
        self._update_held()

    def _target(self, queue: WaitQueue, pending: int, params: BatchParams) -> int:
        long_bound = params.long_context_max_size
        return max(
            1,
            target_batch_size(
                pending,
                queue.tokens / pending,
                min_size=params.min_size,
                max_size=long_bound if queue is self._long else params.max_size,
                small_size=long_bound,
            ),
        )

    def _release(self, queue: WaitQueue, size: int, params: BatchParams) -> None:
        tickets = []
        while queue.waiters and len(tickets) < size:
            ticket = queue.waiters.popleft()
            queue.tokens -= ticket.tokens
            ticket.timer.cancel()
            if ticket.future.cancelled():  # cancelled, and its task has not run its cleanup yet
                ticket.state = _DONE
                continue
            tickets.append(ticket)
        if not tickets:
            return
        now = self._clock()
        self._start(queue, tickets, params, now)
        overdue_after = OVERDUE_TIMEOUTS * params.timeout_ms / 1000
        overdue = 0
        for ticket in tickets:
            waited = now - ticket.queued_at
            queue.wait_sum += waited
            queue.wait_metric.observe(waited)
            if waited > overdue_after:
                overdue += 1
            ticket.future.set_result(None)
        if overdue and self.on_batch_timeouts is not None:
            self.on_batch_timeouts(queue.name, overdue, 0)

    def _start(self, queue: WaitQueue, tickets, params: BatchParams, now: float) -> None:
        size = len(tickets)
        batch = Batch(queue, params.long_context_max_size if queue is self._long else params.max_size, size)
        for ticket in tickets:
            ticket.batch = batch
            ticket.started_at = now
            ticket.state = _ADMITTED
        queue.in_flight += size
        self.in_flight += size
        self._idle.clear()
        queue.batches += 1
        queue.admitted += size
        queue.size_metric.observe(size)
        self.recent_batches.append((queue.name, size))
        if self.on_batch is not None:
            self.on_batch(queue.name, size)

    def _arm_batch_timer(self, queue: WaitQueue, loop: asyncio.AbstractEventLoop, now: float, timeout_s: float) -> None:
        deadline = queue.waiters[0].enqueued_at + timeout_s if queue.waiters else None
        if deadline is None or deadline <= now + _DEADLINE_SLACK_S:
            # Empty, or already due and waiting for a slot: a finishing request dispatches again.
            if queue.timer is not None:
                queue.timer.cancel()
                queue.timer = None
            return
        if queue.timer is not None and queue.timer_at == deadline:
            return
        if queue.timer is not None:
            queue.timer.cancel()
        queue.timer = loop.call_at(deadline, self._on_batch_timer, queue)
        queue.timer_at = deadline

    def _on_batch_timer(self, queue: WaitQueue) -> None:
        queue.timer = None
        self._dispatch()

    def _update_held(self) -> None:
        """Track the time requests wait although a slot is free for them: the time spent filling batches."""
        is_held = False
        if self._open.is_set() and self.in_flight < self._limit:
            is_held = bool(self._short.waiters) or bool(self._long.waiters and self._long.in_flight < self._long_limit)
        self._held.set(is_held)

    def set_engine_capacity(self, max_num_seqs: int | None) -> None:
        """Bound the requests in flight by what the engine runs at once (vLLM's --max-num-seqs): more would only
        wait in vLLM's own queue, out of reach of the long-context share and of the 429/503 limits."""
        self._max_in_flight = max(2, max_num_seqs) if max_num_seqs else None
        self._use_params(self._params_source)
        self._dispatch()

    def _use_params(self, section: dict | None) -> BatchParams:
        params = DEFAULT_PARAMS if section is None else BatchParams.from_section(section)
        self._params_source = section
        self._params = params
        self._limit = self._max_in_flight or IN_FLIGHT_PER_MAX_BATCH * params.max_size
        long_limit = self._long_max_in_flight or LONG_IN_FLIGHT_PER_MAX_BATCH * params.long_context_max_size
        self._long_limit = max(1, min(long_limit, self._limit - 1))
        return params

    def _queue(self, name: str) -> WaitQueue:
        return self._long if name == "long" else self._short
