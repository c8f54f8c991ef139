"""Admission's adaptive batching: batch sizes, timeouts, queue limits, fairness, cancellation and metrics."""

import asyncio
import math

import pytest

from controlplane.params import schema
from engine_node import metrics
from engine_node.admission import (
    DEFAULT_BATCH,
    Admission,
    GateClosed,
    QueueFull,
    QueueTimeout,
    Warming,
    target_batch_size,
)

LONG = 3000  # prompt tokens above the default long_context_threshold (2048)
SLOW_BATCH = {"timeout_ms": 10_000}  # no batch timeout fires within a test


def run(scenario) -> None:
    """Run one scenario; a hang fails the test instead of stalling the suite."""
    asyncio.run(asyncio.wait_for(scenario(), 10))


async def settle(rounds: int = 5) -> None:
    for _ in range(rounds):
        await asyncio.sleep(0)


def request(gate: Admission, *, tokens: int = 10, batch=None, hold=None, entered=None, name=None) -> asyncio.Task:
    """A request that records when it got in and then stays in flight until `hold` is set (or sleeps `hold` s)."""

    async def body():
        async with gate.admitted(prompt_tokens=tokens, batch=batch):
            if entered is not None:
                entered.append(name)
            if isinstance(hold, asyncio.Event):
                await hold.wait()
            elif hold:
                await asyncio.sleep(hold)

    return asyncio.create_task(body())


async def close_gate(gate: Admission) -> None:
    done, _ = await gate.drain(timeout_s=1)
    assert done and not gate.is_open


def sample(name: str, labels: dict | None = None) -> float:
    return metrics.REGISTRY.get_sample_value(name, labels or {}) or 0.0


class FakeClock:
    def __init__(self, now: float = 100.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_defaults_match_the_template_schema():
    assert schema.defaults()["batch"] == DEFAULT_BATCH


def test_batch_size_follows_the_seed_algorithm():
    bounds = {"min_size": 2, "max_size": 8, "small_size": 2}
    assert [target_batch_size(n, 100, **bounds) for n in (1, 2, 3, 5, 6, 16, 40)] == [2, 2, 2, 2, 3, 8, 8]
    assert [target_batch_size(n, 1500, **bounds) for n in (1, 2, 7)] == [1, 2, 2]
    assert target_batch_size(10, 100, min_size=1, max_size=3, small_size=1) == 3


def test_batches_released_in_the_computed_sizes_and_bounded_in_flight():
    async def scenario():
        gate = Admission(queue_timeout_s=5)
        hold = asyncio.Event()
        await close_gate(gate)
        entered = []
        tasks = [request(gate, batch=SLOW_BATCH, hold=hold, entered=entered, name=i) for i in range(17)]
        await settle()
        assert gate.waiting == 17 and gate.in_flight == 0
        gate.resume()
        await settle()
        # 17 pending on an idle engine: 8 (17 // 2 capped at max_size), then 9 // 2 = 4, then 2 and 2; the last
        # one waits for a partner (or the batch timeout) since the engine is busy now.
        assert list(gate.recent_batches) == [("short", 8), ("short", 4), ("short", 2), ("short", 2)]
        assert entered == list(range(16)) and gate.waiting == 1 and gate.in_flight == 16
        tasks.append(request(gate, batch=SLOW_BATCH, hold=hold, entered=entered, name=17))
        await settle()
        assert gate.recent_batches[-1] == ("short", 2) and gate.waiting == 0 and gate.in_flight == 18

        # Long-context prompts: batches of long_context_max_size, at most 2 x that many in flight (4).
        await close_gate_with_running(gate, hold)
        long_holds = [asyncio.Event() for _ in range(5)]
        tasks += [request(gate, tokens=LONG, batch=SLOW_BATCH, hold=h) for h in long_holds]
        await settle()
        gate.resume()
        await settle()
        assert list(gate.recent_batches)[-2:] == [("long", 2), ("long", 2)]
        assert gate.snapshot()["queues"]["long"]["in_flight"] == 4 and gate.waiting == 1
        long_holds[0].set()
        await settle()
        assert gate.recent_batches[-1] == ("long", 1) and gate.waiting == 0
        for h in long_holds:
            h.set()
        await asyncio.gather(*tasks)
        assert gate.in_flight == 0 and gate.waiting == 0

    async def close_gate_with_running(gate, hold):
        hold.set()
        await close_gate(gate)

    run(scenario)


def test_batch_timeout_releases_a_partial_batch():
    async def scenario():
        gate = Admission(queue_timeout_s=5)
        batch = {"timeout_ms": 40}
        hold = asyncio.Event()
        blocker = request(gate, batch=batch, hold=hold)
        await settle()
        entered = []
        waiter = request(gate, batch=batch, hold=hold, entered=entered, name="b")
        await asyncio.sleep(0.01)
        assert entered == [] and gate.waiting == 1  # held for a partner first
        while not entered and not waiter.done():
            await asyncio.sleep(0.002)
        # Released into a batch of one (the 40 ms batch timeout), not refused by the 5 s queue timeout.
        assert entered == ["b"] and gate.snapshot()["rejections"]["queue_timeout"] == 0
        assert gate.recent_batches[-1] == ("short", 1)
        hold.set()
        await asyncio.gather(blocker, waiter)

    run(scenario)


def test_idle_engine_admits_at_once():
    async def scenario():
        gate = Admission(queue_timeout_s=5)
        for tokens in (10, LONG, 10):
            hold = asyncio.Event()
            entered = []
            task = request(gate, tokens=tokens, batch=SLOW_BATCH, hold=hold, entered=entered, name=tokens)
            # In within a few turns of the loop: the 10 s batch timeout cannot have fired, whatever the machine's load.
            await settle()
            assert entered == [tokens] and gate.in_flight == 1 and gate.waiting == 0
            hold.set()
            await task
        assert list(gate.recent_batches) == [("short", 1), ("long", 1), ("short", 1)]
        assert gate.in_flight == 0

    run(scenario)


def test_full_queue_is_refused_with_queue_full():
    async def scenario():
        gate = Admission(queue_timeout_s=5, long_max_in_flight=1)
        full_before = sample("engine_node_admission_rejections_total", {"queue": "short", "reason": "queue_full"})
        batch = {**SLOW_BATCH, "min_size": 8, "max_size": 8, "max_queue": 3, "long_context_max_queue": 1}
        hold = asyncio.Event()
        tasks = [request(gate, batch=batch, hold=hold) for _ in range(4)]  # one in flight, three waiting
        await settle()
        assert gate.in_flight == 1 and gate.waiting == 3
        with pytest.raises(QueueFull) as caught:
            async with gate.admitted(prompt_tokens=10, batch=batch):
                pass
        assert caught.value.retry_after_s == 1 and caught.value.queue == "short"
        # The long-context queue has its own limit: its one slot taken, one waiting, the next refused.
        tasks += [request(gate, tokens=LONG, batch=batch, hold=hold) for _ in range(2)]
        await settle()
        assert gate.snapshot()["queues"]["long"]["in_flight"] == 1 and gate.queue_depth("long") == 1
        with pytest.raises(QueueFull):
            async with gate.admitted(prompt_tokens=LONG, batch=batch):
                pass
        assert gate.snapshot()["rejections"]["queue_full"] == 2
        after = sample("engine_node_admission_rejections_total", {"queue": "short", "reason": "queue_full"})
        assert after - full_before == 1
        hold.set()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        assert gate.in_flight == 0 and gate.waiting == 0

    run(scenario)


def test_waiting_past_the_queue_timeout_gives_queue_timeout():
    async def scenario():
        gate = Admission(queue_timeout_s=0.05)
        batch = {**SLOW_BATCH, "min_size": 8}
        hold = asyncio.Event()
        blocker = request(gate, batch=batch, hold=hold)
        await settle()
        # The 50 ms queue timeout refuses it (the 10 s batch timeout would have admitted it into a batch of one).
        with pytest.raises(QueueTimeout) as caught:
            async with gate.admitted(prompt_tokens=10, batch=batch):
                pass
        assert isinstance(caught.value, GateClosed) and caught.value.retry_after_s == 1
        assert gate.waiting == 0 and gate.in_flight == 1
        # While a drain holds the gate shut the same wait ends in GateClosed.
        drain = asyncio.create_task(gate.drain(timeout_s=5))
        await settle()
        with pytest.raises(GateClosed) as caught:
            async with gate.admitted(prompt_tokens=10, batch=batch):
                pass
        assert type(caught.value) is GateClosed
        assert gate.snapshot()["rejections"] == {"queue_full": 0, "queue_timeout": 1, "gate_closed": 1, "warming": 0}
        hold.set()
        await asyncio.gather(blocker, drain)

    run(scenario)


def test_a_warming_gate_refuses_at_once_those_waiting_too_and_queues_again_after():
    async def scenario():
        gate = Admission(queue_timeout_s=5)
        await gate.drain(0)
        waiting = asyncio.create_task(gate.admitted(prompt_tokens=10).__aenter__())
        await settle()
        assert gate.waiting == 1
        gate.refuse_while_closed(lambda: Warming("gpu-1 is warming up (3/10 warmup requests done)", 2))
        with pytest.raises(Warming) as caught:
            await waiting  # queued before the warmup began: told at once, not after the 5 s queue timeout
        assert caught.value.retry_after_s == 2 and "warming up" in str(caught.value)
        refused = asyncio.create_task(gate.admitted(prompt_tokens=10).__aenter__())
        await settle()  # at once, within a few turns of the loop: not after the 5 s queue timeout
        assert refused.done() and isinstance(refused.exception(), Warming) and gate.waiting == 0
        # Back to queueing (a cold restart's drain), then served when the gate opens.
        gate.refuse_while_closed(None)
        later = request(gate)
        await settle()
        assert gate.waiting == 1
        gate.resume()
        await later
        assert gate.snapshot()["rejections"]["warming"] == 2
        # An open gate takes requests whatever refusal is set.
        gate.refuse_while_closed(lambda: Warming("never", 1))
        await request(gate)

    run(scenario)


def test_a_stream_of_long_requests_does_not_starve_short_ones():
    async def scenario():
        gate = Admission(queue_timeout_s=5, max_in_flight=4, long_max_in_flight=2)
        stop = False
        long_tasks = []

        async def long_stream():
            while not stop:
                while gate.queue_depth("long") < 6:
                    long_tasks.append(request(gate, tokens=LONG, hold=0.02))
                    await asyncio.sleep(0)
                await asyncio.sleep(0.005)

        producer = asyncio.create_task(long_stream())
        await asyncio.sleep(0.05)
        assert gate.queue_depth("long") > 0

        def long_admitted() -> int:
            return gate.snapshot()["queues"]["long"]["admitted"]

        for _ in range(5):
            before = long_admitted()
            async with gate.admitted(prompt_tokens=10):
                # Counted in admissions, not seconds: long requests hold at most two of the four slots, so a
                # short one gets in after at most the two long ones it found in flight are replaced.
                passed = long_admitted() - before
                await asyncio.sleep(0.005)
            assert passed <= 2, passed
            assert gate.queue_depth("long") > 0  # the long backlog was there all along
        stop = True
        await producer
        await asyncio.gather(*long_tasks)
        assert gate.in_flight == 0 and gate.waiting == 0

    run(scenario)


@pytest.mark.parametrize("long_at_once", [1, 2])
def test_a_stream_of_short_requests_does_not_starve_long_ones(long_at_once):
    async def scenario():
        gate = Admission(queue_timeout_s=5, max_in_flight=4, long_max_in_flight=2)
        # Short batches of one take every slot the moment it frees, unless long-context requests get it first;
        # two long ones at once form a batch of two that needs two free slots (kept from the short queue).
        batch = {"min_size": 1, "max_size": 1}
        stop = False
        short_tasks = []

        async def short_stream():
            while not stop:
                while gate.queue_depth("short") < 10:
                    short_tasks.append(request(gate, batch=batch, hold=0.01))
                    await asyncio.sleep(0)
                await asyncio.sleep(0.002)

        def short_admitted() -> int:
            return gate.snapshot()["queues"]["short"]["admitted"]

        async def long_request(passed):
            before = short_admitted()
            async with gate.admitted(prompt_tokens=LONG, batch=batch):
                passed.append(short_admitted() - before)
                await asyncio.sleep(0.005)

        producer = asyncio.create_task(short_stream())
        await asyncio.sleep(0.05)
        for _ in range(3):
            assert gate.queue_depth("short") >= 5
            # Counted in admissions, not seconds (a busy machine stretches time, not the order): while the long
            # batch waits, at most one short request per in-flight slot gets past it (the slots it found busy
            # or free as it arrived); from then on every freed slot goes to the long batch first. A gate that
            # let the short stream go first would admit shorts until the long ones' queue timeout.
            passed = []
            await asyncio.gather(*(long_request(passed) for _ in range(long_at_once)))
            assert max(passed) <= 4, passed
        stop = True
        await producer
        await asyncio.gather(*short_tasks)
        assert gate.in_flight == 0 and gate.waiting == 0

    run(scenario)


def test_cancelled_waiters_leave_cleanly_and_leak_no_slot():
    async def scenario():
        gate = Admission(queue_timeout_s=5)
        batch = {**SLOW_BATCH, "min_size": 8}
        hold = asyncio.Event()
        blocker = request(gate, batch=batch, hold=hold)
        await settle()
        waiters = [request(gate, tokens=100, batch=batch, hold=hold) for _ in range(5)]
        await settle()
        assert gate.waiting == 5
        for task in waiters[:3]:
            task.cancel()
        await settle()
        assert gate.waiting == 2 and gate._short.tokens == 200
        hold.set()
        await asyncio.gather(blocker, *waiters[3:])
        assert gate.in_flight == 0 and gate.waiting == 0

        # Cancelled after its release but before it ran: the slot comes back.
        await close_gate(gate)
        granted = request(gate, batch=batch, hold=asyncio.Event())
        await settle()
        gate.resume()
        granted.cancel()
        await asyncio.gather(granted, return_exceptions=True)
        assert granted.cancelled() and gate.in_flight == 0 and gate._idle.is_set()

        # Cancelled while waiting, released by the dispatcher before its cleanup ran: skipped, not admitted.
        await close_gate(gate)
        gone = request(gate, batch=batch)
        kept = request(gate, batch=batch)
        await settle()
        gone.cancel()
        gate.resume()
        await asyncio.gather(gone, kept, return_exceptions=True)
        assert gate.recent_batches[-1] == ("short", 1)
        assert gate.in_flight == 0 and gate.waiting == 0 and gate._short.tokens == 0
        assert gate.snapshot()["queues"]["short"]["admitted"] == 3 + 1 + 1

    run(scenario)


def test_drain_keeps_waiting_requests_queued_until_resume():
    async def scenario():
        gate = Admission(queue_timeout_s=5)
        batch = {"timeout_ms": 10}
        hold = asyncio.Event()
        blocker = request(gate, batch=batch, hold=hold)
        await settle()
        drain = asyncio.create_task(gate.drain(timeout_s=5))
        entered = []
        waiter = request(gate, batch=batch, entered=entered, name="w")
        await settle()
        hold.set()
        done, _ = await drain
        assert done and gate.in_flight == 0
        await asyncio.sleep(0.05)  # well past the batch timeout: the closed gate dispatches nothing
        assert entered == [] and gate.waiting == 1
        gate.resume()
        await settle()
        assert entered == ["w"]
        await asyncio.gather(blocker, waiter)

    run(scenario)


def test_metrics_after_a_scripted_sequence():
    async def scenario():
        clock = FakeClock(100.0)
        gate = Admission(queue_timeout_s=5, window_s=60, clock=clock)
        batch = {"min_size": 2, "max_size": 4, "timeout_ms": 10_000}
        size_count = sample("engine_node_admission_batch_size_count", {"queue": "short"})
        size_sum = sample("engine_node_admission_batch_size_sum", {"queue": "short"})
        wait_count = sample("engine_node_admission_queue_wait_seconds_count", {"queue": "short"})
        wait_sum = sample("engine_node_admission_queue_wait_seconds_sum", {"queue": "short"})
        holds = {name: asyncio.Event() for name in "abc"}

        a = request(gate, batch=batch, hold=holds["a"])  # idle engine: a batch of one at t=100
        await settle()
        b = request(gate, batch=batch, hold=holds["b"])  # waits for a partner with slots free
        await settle()
        assert sample("engine_node_admission_queue_depth", {"queue": "short"}) == 1
        clock.now = 101.0
        c = request(gate, batch=batch, hold=holds["c"])  # b and c leave together at t=101
        await settle()
        assert gate.recent_batches[-1] == ("short", 2)
        for name, at in (("a", 102.0), ("b", 103.0), ("c", 105.0)):
            clock.now = at
            holds[name].set()
            await settle()
        await asyncio.gather(a, b, c)

        # a: 2 s alone in a batch bounded by 4 -> 2 / (4 x 2) = 0.25; b and c: (2 + 4) / (4 x 4) = 0.375.
        snap = gate.snapshot()
        assert snap["queues"]["short"] == {
            "depth": 0,
            "in_flight": 0,
            "batches": 2,
            "admitted": 3,
            "mean_batch_size": 1.5,
            "mean_wait_s": pytest.approx(1 / 3),
            "efficiency": pytest.approx(0.3125),
        }
        assert snap["queues"]["long"]["efficiency"] is None
        assert snap["efficiency"] == pytest.approx(0.3125)
        assert snap["idle_ratio"] == pytest.approx(1 / 5)  # b waited 1 s with free slots, of 5 s so far
        assert sample("engine_node_batch_efficiency", {"queue": "short"}) == pytest.approx(0.3125)
        assert math.isnan(metrics.REGISTRY.get_sample_value("engine_node_batch_efficiency", {"queue": "long"}))
        assert sample("engine_node_batch_idle_ratio") == pytest.approx(0.2)
        assert sample("engine_node_admission_batch_size_count", {"queue": "short"}) - size_count == 2
        assert sample("engine_node_admission_batch_size_sum", {"queue": "short"}) - size_sum == 3
        assert sample("engine_node_admission_queue_wait_seconds_count", {"queue": "short"}) - wait_count == 3
        assert sample("engine_node_admission_queue_wait_seconds_sum", {"queue": "short"}) - wait_sum == 1.0

        # A minute later the window holds none of it.
        clock.now = 200.0
        assert gate.snapshot()["efficiency"] is None and gate.idle_ratio() == 0.0

        hold = asyncio.Event()
        batch = {**batch, "max_queue": 1}
        tasks = [request(gate, batch=batch, hold=hold) for _ in range(2)]  # one in flight, one waiting
        await settle()
        clock.now = 230.0
        assert gate.idle_ratio() == pytest.approx(30 / 60)
        with pytest.raises(QueueFull):
            async with gate.admitted(prompt_tokens=10, batch=batch):
                pass
        assert gate.snapshot()["rejections"] == {"queue_full": 1, "queue_timeout": 0, "gate_closed": 0, "warming": 0}
        hold.set()
        await asyncio.gather(*tasks)
        assert gate.in_flight == 0 and gate.waiting == 0

    run(scenario)


def test_the_engine_capacity_bounds_requests_in_flight():
    async def scenario():
        gate = Admission(5)

        def limits():
            snapshot = gate.snapshot()
            return snapshot["max_in_flight"], snapshot["long_max_in_flight"]

        assert limits() == (32, 4)  # 4 x max_size 8, 2 x long_context_max_size 2
        gate.set_engine_capacity(3)
        assert limits() == (3, 2)
        hold = asyncio.Event()
        entered: list = []
        tasks = [request(gate, hold=hold, entered=entered, name=i) for i in range(5)]
        await asyncio.sleep(0.2)
        assert len(entered) == 3 and gate.waiting == 2
        hold.set()
        await asyncio.gather(*tasks)
        gate.set_engine_capacity(None)
        assert limits() == (32, 4)

    run(scenario)
