"""The warmup runner against a scripted engine (an aiohttp server whose latency the test sets): pass, fail on
P99 or errors, the concurrency ramp, the duration bound, and the agent's dataset store."""

import asyncio
import json
import time

import pytest
from aiohttp import web

from controlplane.params.schema import defaults
from engine_node.policy.rules import Policy
from engine_node.state import WarmupStore
from engine_node.warmup import (
    DEFAULTS,
    WarmupRunner,
    concurrency_cap,
    messages_sha256,
    percentile,
    warmup_params,
)


class ScriptedEngine:
    """/v1/models and /v1/chat/completions; records each request's body and the requests in flight."""

    def __init__(self, latency_s: float = 0.0, status: int = 200):
        self.latency_s = latency_s
        self.status = status
        self.in_flight = 0
        self.max_in_flight = 0
        self.bodies: list[dict] = []
        self.in_flight_at: list[tuple[float, int]] = []

    async def models(self, request):
        return web.json_response({"object": "list", "data": [{"id": "scripted-model"}]})

    async def chat(self, request):
        self.bodies.append(await request.json())
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        self.in_flight_at.append((time.monotonic(), self.in_flight))
        try:
            await asyncio.sleep(self.latency_s)
        finally:
            self.in_flight -= 1
        if self.status != 200:
            return web.json_response({"error": "scripted"}, status=self.status)
        return web.json_response({"choices": [{"message": {"role": "assistant", "content": "ok"}}]})


@pytest.fixture
def engine():
    return ScriptedEngine()


def messages(n: int) -> list[dict]:
    return [{"text": f"我的订单{i}到哪了？"} for i in range(n)]


def run(engine: ScriptedEngine, n: int, **params) -> tuple[dict, list[dict]]:
    """Serve the scripted engine on a free port and warm it up with `n` messages; (result, progress sent)."""

    async def scenario():
        app = web.Application()
        app.router.add_get("/v1/models", engine.models)
        app.router.add_post("/v1/chat/completions", engine.chat)
        server = web.AppRunner(app)
        await server.setup()
        site = web.TCPSite(server, "127.0.0.1", 0)
        await site.start()
        url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
        runner = WarmupRunner(engine_url=lambda: url)
        sent: list[dict] = []

        async def on_progress(document):
            sent.append(dict(document))

        max_num_seqs = params.pop("max_num_seqs", 64)
        try:
            result = await runner.run(
                messages=messages(n),
                params={**DEFAULTS, **params},
                policy=Policy(None),
                max_num_seqs=max_num_seqs,
                trigger="test",
                on_progress=on_progress,
            )
        finally:
            await runner.close()
            await server.cleanup()
        return result, sent

    return asyncio.run(scenario())


def test_defaults_match_the_schema():
    assert defaults()["warmup"] == DEFAULTS
    assert warmup_params(None) == DEFAULTS
    assert warmup_params({"warmup": {"step_s": 5}})["step_s"] == 5


def test_the_cap_is_the_capacity_fraction_of_max_num_seqs_never_below_the_initial_concurrency():
    assert concurrency_cap(DEFAULTS, 64) == 4  # ceil(0.05 x 64)
    assert concurrency_cap(DEFAULTS, 256) == 13
    assert concurrency_cap(DEFAULTS, 4) == 2  # 0.2 rounds up to 1, the initial 2 wins
    assert concurrency_cap({**DEFAULTS, "capacity_fraction": 0.5}, 10) == 5


def test_percentile_is_nearest_rank():
    values = [float(i) for i in range(1, 101)]
    assert percentile(values, 0.99) == 99.0
    assert percentile(values, 0.5) == 50.0
    assert percentile([], 0.99) is None


def test_a_fast_engine_passes_and_requests_carry_the_policy(engine):
    engine.latency_s = 0.01
    result, sent = run(engine, 30, check_requests=10)
    assert result["state"] == "passed", result
    assert result["done"] == 30 and result["check_requests"] == 10
    assert result["p99"] < 2.0 and "p99" in result["reason"]
    assert sent[0]["state"] == "running" and sent[-1]["state"] == "passed"
    body = engine.bodies[0]
    assert body["model"] == "scripted-model"
    # The gateway's policy: the normal tier's temperature and the default max_tokens cap.
    assert body["temperature"] == 0.7 and body["max_tokens"] == 256
    assert engine.max_in_flight <= 2  # step_s 30: never raised within this short run


def test_slow_first_requests_fail_the_check_and_stop_the_run(engine):
    engine.latency_s = 0.3
    result, _ = run(engine, 100, check_requests=10, max_p99_s=0.1, initial_concurrency=5)
    assert result["state"] == "failed", result
    assert result["reason"].startswith("warmup failed: p99 0.3") and "> 0.1 s" in result["reason"]
    # It stopped at the check: the 10 checked plus at most the ones already in flight.
    assert len(engine.bodies) <= 15


def test_errors_above_the_budget_fail_the_check(engine):
    engine.status = 500
    result, _ = run(engine, 20, check_requests=5)
    assert result["state"] == "failed"
    assert "error rate 100.0% > 0.0%" in result["reason"]


def test_concurrency_rises_by_one_each_healthy_step_up_to_the_cap(engine):
    engine.latency_s = 0.05
    result, sent = run(engine, 400, check_requests=10, step_s=1, max_num_seqs=80, max_duration_s=30)
    assert result["state"] == "passed"
    assert result["max_concurrency"] == 4  # ceil(0.05 x 80)
    seen = [d["concurrency"] for d in sent]
    assert seen[0] == 2 and max(seen) == 4
    assert seen == sorted(seen)  # one step at a time, never down
    assert engine.max_in_flight == 4


def test_an_unhealthy_step_does_not_raise_concurrency(engine):
    engine.latency_s = 0.05
    # Every request is over the P99 line, so no step is healthy: the run stays at 2 and the check then fails.
    result, sent = run(engine, 60, check_requests=60, step_s=1, max_p99_s=0.04, max_duration_s=10)
    assert result["state"] == "failed"
    assert {d["concurrency"] for d in sent} == {2}


def test_a_check_not_reached_within_max_duration_fails(engine):
    engine.latency_s = 3
    result, _ = run(engine, 10, check_requests=10, max_duration_s=1, max_p99_s=60)
    assert result["state"] == "failed"
    assert "within warmup.max_duration_s (1s)" in result["reason"]


def test_the_store_keeps_a_dataset_only_when_its_sha256_verifies(tmp_path):
    store = WarmupStore(tmp_path)
    items = messages(3)
    store.save({"version_id": 7, "sha256": messages_sha256(items), "messages": items})
    assert store.load()["messages"] == items
    document = json.loads(store.path.read_text())
    document["messages"][0]["text"] = "tampered"
    store.path.write_text(json.dumps(document))
    assert store.load() is None
    store.forget()
    assert store.load() is None


def test_the_agent_hash_is_the_control_planes():
    from controlplane.datasets.warmup_uploads import parse_warmup_upload

    parsed = parse_warmup_upload("text,intent\n我的订单到哪了？,order_status\n怎么退货,return_refund\n".encode(), "csv")
    assert messages_sha256(json.loads(parsed.messages_json)) == parsed.sha256
