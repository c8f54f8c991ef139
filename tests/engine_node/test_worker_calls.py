"""The workers' calls through /collective_rpc never give the engine a timeout, and never pile up.

vLLM's multiprocess executor (tensor parallelism) takes the body's `timeout` as the deadline of its wait for the
workers; a call that passes it leaves the replies in the response queue for the next model step to read instead
of its output, and the engine core dies (tests/engine_node/test_vllm_gpu_paths.py shows it on the vLLM CPU build).
Here, against a real little HTTP server standing in for the engine: the agent's body has no `timeout`, the agent
bounds only its own wait, and a call it stopped waiting for stays the one outstanding call.
"""

import asyncio

import aiohttp
from aiohttp import web

from engine_node.admission import Admission
from engine_node.cleanup import MemoryCleanup
from engine_node.fragmentation import STATS_METHOD, EngineCallFailed, WorkerCalls, collective_rpc
from tests.aiohttp_apps import start_app

WORKER = {"rank": 0, "device": "cuda", "fragmentation": 0.1, "reserved_bytes": 10, "inactive_split_bytes": 1}


class SlowEngine:
    """Answers /collective_rpc only when `release` is set, as an engine busy with a long step would."""

    def __init__(self):
        self.bodies: list[dict] = []
        self.release = asyncio.Event()

    async def collective_rpc(self, request: web.Request) -> web.Response:
        self.bodies.append(await request.json())
        await self.release.wait()
        return web.json_response({"results": [WORKER]})

    async def metrics(self, request: web.Request) -> web.Response:
        return web.Response(text='vllm:kv_cache_usage_perc{engine="0"} 0.25\n')

    async def start(self) -> tuple[web.AppRunner, str]:
        app = web.Application()
        app.router.add_post("/collective_rpc", self.collective_rpc)
        app.router.add_get("/metrics", self.metrics)
        return await start_app(app)


def test_the_body_names_the_method_and_no_timeout():
    async def scenario():
        engine = SlowEngine()
        engine.release.set()
        runner, url = await engine.start()
        try:
            async with aiohttp.ClientSession() as http:
                results = await collective_rpc(http, url, STATS_METHOD, 5)
        finally:
            await runner.cleanup()
        return engine.bodies, results

    bodies, results = asyncio.run(scenario())
    assert bodies == [{"method": STATS_METHOD}]
    assert results == [WORKER]


def test_a_call_the_agent_stopped_waiting_for_stays_the_only_one_and_its_answer_is_used():
    async def scenario():
        engine = SlowEngine()
        runner, url = await engine.start()
        http = aiohttp.ClientSession()
        calls = WorkerCalls(lambda: http)
        try:
            failures = []
            for _ in range(3):  # three periodic reads while the engine is busy: one call reaches it
                try:
                    await calls.call(url, STATS_METHOD, 0.2)
                except EngineCallFailed as exc:
                    failures.append(str(exc))
            outstanding = calls.outstanding()
            seen_while_busy = len(engine.bodies)
            engine.release.set()
            answered = await calls.call(url, STATS_METHOD, 5)  # waits for the outstanding call itself
            after_answer = len(engine.bodies)
            fresh = await calls.call(url, STATS_METHOD, 5)  # the next read is a new call
            return failures, outstanding, seen_while_busy, answered, after_answer, fresh, len(engine.bodies)
        finally:
            await calls.close()
            await http.close()
            await runner.cleanup()

    failures, outstanding, seen_while_busy, answered, after_answer, fresh, total = asyncio.run(scenario())
    assert len(failures) == 3 and all("no answer within 0.2s" in f and "stays outstanding" in f for f in failures)
    assert outstanding == [STATS_METHOD]
    assert seen_while_busy == 1 and after_answer == 1
    assert answered == fresh == [WORKER]
    assert total == 2


def test_the_cleanups_reading_goes_through_the_one_outstanding_call():
    async def scenario():
        engine = SlowEngine()
        runner, url = await engine.start()
        cleanup = MemoryCleanup(engine_url=lambda: url, backend="vllm", admission=Admission(5), drain_timeout_s=1)
        try:
            first = await cleanup.read(0.2)
            second = await cleanup.read(0.2)
            busy = len(engine.bodies)
            engine.release.set()
            third = await cleanup.read(5)
            return first, second, busy, third, engine.bodies
        finally:
            await cleanup.close()
            await runner.cleanup()

    first, second, busy, third, bodies = asyncio.run(scenario())
    # While the workers have not answered: KV usage from /metrics, no fragmentation, the reason said.
    assert first["fragmentation"] is None and first["kv_cache_usage"] == 0.25 and "no answer within" in first["error"]
    assert second["fragmentation"] is None
    assert busy == 1
    assert third["fragmentation"] == 0.1 and "error" not in third
    assert third["per_worker"] == [{"rank": 0, "device": "cuda", "fragmentation": 0.1}]
    assert all("timeout" not in body for body in bodies)
