"""Memory cleanup against a real simulator process, without the control plane: the measurement, the drain that
never drops a request, the timeout that resumes anyway, the automatic trigger's decision and the defaults."""

import asyncio
import json
import subprocess
import sys
import urllib.request

import aiohttp
import pytest

from engine_node.admission import Admission
from engine_node.cleanup import DEFAULTS, REQUEST_RETRY_S, SETTLED_REREAD_S, MemoryCleanup, cleanup_params
from engine_node.fragmentation import STATS_METHOD, WorkerCalls, read_fragmentation, summarise
from tests.engine_node.fleet import wait_until
from tests.live_server import ROOT, free_port

# A 16-block KV cache and mixed reply lengths: interleaved sequences leave holes, fragmentation climbs fast.
FRAGMENTING_PROFILE = """
latency:
  time_scale: 0.05
reply_length:
  median: 10
  sigma: 0.6
  min: 2
  max: 32
kv_cache:
  block_size: 16
  bytes_per_token: 1024
  kv_cache_bytes: 300000
"""
TEXTS = ["我的订单到哪了？", "怎么退货", "推荐一款适合送礼的耳机，预算五百元左右", "优惠券为什么不能用", "发票怎么开"]


@pytest.fixture
def simulator(tmp_path):
    profile = tmp_path / "fragmenting.yaml"
    profile.write_text(FRAGMENTING_PROFILE)
    port = free_port()
    args = ["--port", str(port), "--profile", str(profile), "--max-model-len", "128", "--model", "m"]
    process = subprocess.Popen(
        [sys.executable, "-m", "engine_node.simulator", *args],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"

    def ready():
        try:
            return urllib.request.urlopen(f"{url}/health", timeout=1).status == 200
        except OSError:
            return False

    try:
        wait_until(ready, 20, "the simulator to listen")
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)


async def chat(http: aiohttp.ClientSession, url: str, text: str, max_tokens: int = 16, **extra) -> int:
    body = {"model": "m", "messages": [{"role": "user", "content": text}], "max_tokens": max_tokens, **extra}
    async with http.post(f"{url}/v1/chat/completions", json=body) as response:
        await response.read()
        return response.status


async def fragment(http: aiohttp.ClientSession, url: str, above: float) -> dict:
    """Mixed traffic until the engine's fragmentation passes `above`."""
    for round_ in range(200):
        await asyncio.gather(*(chat(http, url, f"{TEXTS[i % len(TEXTS)]} {round_}-{i}") for i in range(4)))
        reading = await read_fragmentation(http, url, "simulator")
        if reading["fragmentation"] > above:
            return reading
    raise AssertionError("fragmentation never passed the threshold")


def test_defaults_match_the_schema():
    from controlplane.params.schema import defaults

    assert defaults()["cleanup"] == DEFAULTS
    assert cleanup_params(None) == DEFAULTS
    assert cleanup_params({"cleanup": {"interval_s": 60}})["interval_s"] == 60


def test_summary_of_workers_is_the_worst_worker_and_summed_bytes():
    bytes_ = ("reserved_bytes", "allocated_bytes", "inactive_split_bytes")
    workers = [
        {"device": "cuda", "fragmentation": 0.1, **dict(zip(bytes_, (100, 50, 10), strict=True))},
        {"device": "cuda", "fragmentation": 0.4, **dict(zip(bytes_, (100, 40, 40), strict=True))},
    ]
    summary = summarise(workers, "vllm")
    assert (summary["fragmentation"], summary["reserved_bytes"], summary["inactive_split_bytes"]) == (0.4, 200, 50)
    cpu = summarise([{"device": "cpu", "fragmentation": None, "reserved_bytes": None}], "vllm")
    assert (cpu["fragmentation"], cpu["reserved_bytes"], cpu["device"]) == (None, None, "cpu")


@pytest.mark.subprocess
def test_cleanup_drains_resets_and_brings_fragmentation_down(simulator):
    async def scenario():
        admission = Admission(queue_timeout_s=10)
        cleanup = MemoryCleanup(
            engine_url=lambda: simulator, backend="simulator", admission=admission, drain_timeout_s=5
        )
        steps: list[str] = []

        async def progress(state, text=""):
            steps.append(text)

        async with aiohttp.ClientSession() as http:
            before = await fragment(http, simulator, above=0.35)
            assert before["device"] == "simulated" and before["reserved_bytes"] > 0

            # An admitted request still running when the cleanup starts (slowed to ~1 s): the drain waits for it.
            async with http.post(f"{simulator}/sim/faults", json={"latency_factor": 50}) as response:
                assert response.status == 200

            async def admitted_request():
                async with admission.admitted(prompt_tokens=10):
                    return await chat(http, simulator, "一个很长的问题", max_tokens=32, ignore_eos=True, min_tokens=32)

            running = asyncio.create_task(admitted_request())
            await asyncio.sleep(0.05)
            assert admission.in_flight == 1
            reopened = []
            ok, result = await cleanup.run(
                trigger="operator",
                params={**DEFAULTS, "max_duration_s": 20},
                progress=progress,
                reopen=lambda: (reopened.append(True), admission.resume()),
            )
            assert running.done() and running.result() == 200
            await cleanup.close()
        return ok, result, steps, reopened

    ok, result, steps, reopened = asyncio.run(scenario())
    assert ok, result
    assert result["before"]["fragmentation"] > 0.35
    assert result["after"]["fragmentation"] < 0.35
    assert result["after"]["fragmentation"] == pytest.approx(0.02)  # the profile's floor: nothing stranded
    assert result["prefix_cache_reset"] is True
    assert result["released"]["released_blocks"] > 0
    assert result["drained_s"] > 0.3
    assert result["trigger"] == "operator" and result["finished_at"] >= result["started_at"]
    assert reopened == [True]
    assert steps[0].startswith("draining")
    json.dumps(result)  # plain JSON, as the command result carries it


@pytest.mark.subprocess
def test_two_readers_waiting_on_one_workers_call_both_get_its_answer(simulator):
    """The periodic check's reading and a cleanup's can wait on the same outstanding call: both get the workers'
    results when it answers (the second used to fail with a KeyError, which left the cleanup command unfinished)."""

    async def scenario():
        async with aiohttp.ClientSession() as http:
            calls = WorkerCalls(lambda: http)
            first, second = await asyncio.gather(
                calls.call(simulator, STATS_METHOD, 10), calls.call(simulator, STATS_METHOD, 10)
            )
            again = await calls.call(simulator, STATS_METHOD, 10)  # a new call once that one has answered
            left = calls.outstanding()
            await calls.close()
        return first, second, again, left

    first, second, again, left = asyncio.run(scenario())
    assert first == second and len(first) == 1 and "fragmentation" in first[0]
    assert len(again) == 1 and left == []


@pytest.mark.subprocess
def test_an_idle_vllm_engine_is_read_once_until_a_request_starts_or_the_status_changes(simulator):
    """The automatic check's reading on vLLM (the simulator answers the same workers' call): taken again only when
    the engine has worked since, the node's status changed, or SETTLED_REREAD_S passed; on the simulator always."""

    async def scenario():
        admission = Admission(queue_timeout_s=10)
        vllm = MemoryCleanup(engine_url=lambda: simulator, backend="vllm", admission=admission, drain_timeout_s=5)
        sim = MemoryCleanup(engine_url=lambda: simulator, backend="simulator", admission=admission, drain_timeout_s=5)
        reads = []

        async def check(cleanup):
            before = cleanup.last_read_at
            reading = await cleanup.check_reading()
            reads.append(cleanup.last_read_at != before)
            return reading

        async with aiohttp.ClientSession() as http:
            first = await check(vllm)
            assert first["fragmentation"] is not None and vllm.settled()
            assert await check(vllm) is first  # idle: the same reading, no call
            async with admission.admitted(prompt_tokens=10):
                assert not vllm.settled()  # in flight
                assert await chat(http, simulator, "怎么退货") == 200
            await check(vllm)  # a request ran since: read again
            await check(vllm)  # and settled again
            vllm.unsettle()  # the node's status changed (a drain, a restart)
            await check(vllm)
            vllm.last_read_at -= SETTLED_REREAD_S  # settled, but as old as the re-read bound
            await check(vllm)
            await check(sim)
            await check(sim)  # the simulator's faults move its figures without traffic: read every time
            assert not sim.settled()
            await vllm.close()
            await sim.close()
        return reads

    assert asyncio.run(scenario()) == [True, False, True, False, True, True, True, True]


@pytest.mark.subprocess
def test_a_drain_that_does_not_finish_resumes_and_reports_failure(simulator):
    async def scenario():
        admission = Admission(queue_timeout_s=10)
        cleanup = MemoryCleanup(
            engine_url=lambda: simulator, backend="simulator", admission=admission, drain_timeout_s=30
        )
        released = asyncio.Event()

        async def stuck_request():
            async with admission.admitted():
                await released.wait()
                return "finished"

        stuck = asyncio.create_task(stuck_request())
        await asyncio.sleep(0.01)

        async def progress(state, text=""):
            return None

        ok, result = await cleanup.run(
            trigger="timer",
            params={**DEFAULTS, "max_duration_s": 1},
            progress=progress,
            reopen=admission.resume,
        )
        gave_up_first = not stuck.done()  # the request is released only after the cleanup returned
        gate_open = admission.is_open
        released.set()
        outcome = await stuck
        await cleanup.close()
        return ok, result, gave_up_first, gate_open, outcome

    ok, result, gave_up_first, gate_open, outcome = asyncio.run(scenario())
    assert not ok
    assert "max_duration_s" in result["error"] or "still running" in result["error"]
    assert "prefix_cache_reset" not in result
    assert gave_up_first
    assert gate_open
    assert outcome == "finished"  # the request was never dropped


def test_automatic_trigger_threshold_cooldown_timer_and_retry():
    cleanup = MemoryCleanup(engine_url=lambda: "", backend="simulator", admission=None, drain_timeout_s=1)
    start = cleanup._last_finished
    params = {**DEFAULTS, "fragmentation_threshold": 0.35, "cooldown_s": 10, "interval_s": 0}
    high, low = {"fragmentation": 0.5}, {"fragmentation": 0.2}
    assert cleanup.due(params, high, now=start + 5) is None  # cooling down since the start
    assert cleanup.due(params, high, now=start + 11) == "threshold"
    assert cleanup.due(params, low, now=start + 11) is None
    assert cleanup.due(params, {"fragmentation": None}, now=start + 11) is None  # CPU: no figure, no trigger
    assert cleanup.due({**params, "fragmentation_threshold": 1.0}, {"fragmentation": 1.0}, now=start + 11) is None
    assert cleanup.due({**params, "interval_s": 60}, low, now=start + 61) == "timer"
    cleanup.requested("threshold")
    now, eager = cleanup._requested_at, {**params, "cooldown_s": 0}
    assert cleanup.due(eager, high, now=now + 1) is None  # asked already: wait for the answer
    assert cleanup.due(eager, high, now=now + REQUEST_RETRY_S + 0.1) == "threshold"
    assert cleanup.take_trigger() == "threshold"
    assert cleanup.take_trigger() == "operator"
