"""The agent's 1 Hz metric sample: request and batch windows, and a real agent's sample (the engine scrape and the
GPU readings: test_engine_scrape.py).

The last tests run `python -m engine_node` on the simulator (standalone, no control plane), send it chat requests
and read the sample the agent built from its `/healthz` debug view, and check its `/metrics` with promtool.
"""

import asyncio
import json
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from engine_node.admission import Admission, QueueTimeout
from engine_node.gpus import gpu_inventory
from engine_node.telemetry import (
    SAMPLE_KEYS,
    BatchLog,
    RequestLog,
)
from engine_node.telemetry.requests import percentile
from tests.engine_node.fleet import TEST_CLIENT_KEY, wait_until
from tests.engine_node.test_gateway_policy import start_node

NGRAM = {"enabled": True, "method": "ngram", "num_speculative_tokens": 3}


class FakeClock:
    def __init__(self, now: float = 1000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


# --- request and batch windows ---------------------------------------------------------------------------------


def test_percentiles_are_nearest_rank():
    values = [float(v) for v in range(1, 1001)]
    assert percentile(values, 0.5) == 500
    assert percentile(values, 0.99) == 990
    assert percentile(values, 0.999) == 999
    assert percentile([0.2], 0.999) == 0.2
    assert percentile([], 0.5) is None


def test_request_log_rates_and_distributions_over_the_window():
    clock = FakeClock()
    log = RequestLog(window_s=10, clock=clock)
    clock.now += 60  # long past start: the window is a full 10 s
    for i in range(100):  # 100 answered requests, e2e 0.01 .. 1.00 s
        log.record(e2e_s=(i + 1) / 100, outcome="ok", tokens=100 + 20 * i, intent="order_status", tier="strict")
    for _ in range(5):
        log.record(e2e_s=0.001, outcome="rejected", intent="chitchat", tier="creative")
    for _ in range(3):
        log.record(e2e_s=30.0, outcome="error", intent="tag", tier="normal")
    log.record(e2e_s=0.05, outcome="ok", ttft_s=0.02, tokens=3000, intent="none", tier="normal")
    log.record(e2e_s=0.06, outcome="ok", ttft_s=0.04, tokens=None, intent="none", tier="normal")

    stats = log.stats()

    total = 110
    assert stats["qps"] == pytest.approx((total - 5) / 10)
    assert stats["error_rate"] == pytest.approx(3 / total)
    assert stats["rejected_rate"] == pytest.approx(5 / total)
    # Percentiles over the 102 answered requests only: errors (30 s) and rejections do not count.
    answered = sorted([(i + 1) / 100 for i in range(100)] + [0.05, 0.06])
    assert stats["latency_p50_s"] == answered[50]
    assert stats["latency_p99_s"] == answered[100] == 0.99
    assert stats["latency_p999_s"] == 1.0
    assert (stats["ttft_p50_s"], stats["ttft_p99_s"]) == (0.02, 0.04)
    # Tokens 100, 120, ..., 2080 and one of 3000.
    assert stats["length_hist"] == {"le256": 8, "le512": 13, "le1k": 26, "le2k": 51, "gt2k": 3}
    assert stats["long_request_share"] == pytest.approx(54 / 101)
    assert stats["intents"] == {"order_status": 100, "chitchat": 5, "tag": 3, "none": 2}
    assert stats["tiers"] == {"strict": 100, "normal": 5, "creative": 5}


def test_request_log_forgets_requests_older_than_the_window():
    clock = FakeClock()
    log = RequestLog(window_s=10, clock=clock)
    clock.now += 100
    log.record(e2e_s=5.0, outcome="ok", tokens=10)
    clock.now += 9.9
    log.record(e2e_s=0.1, outcome="ok", tokens=10)
    assert log.stats()["latency_p99_s"] == 5.0 and log.stats()["qps"] == pytest.approx(0.2)
    clock.now += 0.2  # the first request is 10.1 s old now
    stats = log.stats()
    assert stats["latency_p99_s"] == 0.1 and stats["qps"] == pytest.approx(0.1)
    clock.now += 20
    empty = log.stats()
    assert empty["qps"] == 0 and empty["error_rate"] is None and empty["rejected_rate"] is None
    assert empty["latency_p50_s"] is None and empty["long_request_share"] is None
    assert empty["tiers"] == {"strict": 0, "normal": 0, "creative": 0} and empty["intents"] == {}


def test_request_log_counts_classified_requests_below_the_floor_and_their_confidences():
    clock = FakeClock()
    log = RequestLog(window_s=10, clock=clock)
    for confidence in (0.05, 0.55, 0.79, 0.8, 0.95, 1.0):
        log.record(e2e_s=0.1, outcome="ok", confidence=confidence, below_floor=confidence < 0.8)
    log.record(e2e_s=0.1, outcome="rejected", confidence=0.31, below_floor=True)  # refused, but it was classified
    log.record(e2e_s=0.1, outcome="ok", intent="tag")  # a business tag: no classification
    log.record(e2e_s=0.1, outcome="ok", confidence=float("nan"), below_floor=True)  # no reading, not a bucket
    stats = log.stats()
    assert stats["intent_classified"] == 7
    assert stats["intent_below_floor_share"] == pytest.approx(4 / 7)
    assert stats["intent_confidence_hist"] == {
        "0-10": 1, "10-20": 0, "20-30": 0, "30-40": 1, "40-50": 0,
        "50-60": 1, "60-70": 0, "70-80": 1, "80-90": 1, "90-100": 2,
    }  # fmt: skip
    clock.now += 20
    empty = log.stats()
    assert empty["intent_classified"] == 0 and empty["intent_below_floor_share"] is None
    assert set(empty["intent_confidence_hist"].values()) == {0} and len(empty["intent_confidence_hist"]) == 10


def test_qps_right_after_start_divides_by_the_time_the_log_has_existed():
    clock = FakeClock()
    log = RequestLog(window_s=10, clock=clock)
    clock.now += 2
    for _ in range(4):
        log.record(e2e_s=0.1, outcome="ok")
    assert log.stats()["qps"] == pytest.approx(2.0)


def test_batch_log_histogram_and_mean():
    clock = FakeClock()
    batches = BatchLog(window_s=10, clock=clock)
    for size in (8, 4, 2, 2, 1):
        batches.observe("short", size)
    assert batches.stats() == {
        "batch_size_mean": pytest.approx(17 / 5),
        "batch_size_hist": {"1": 1, "2": 2, "4": 1, "8": 1},
        "batch_timeout_rate": 0.0,
    }
    clock.now += 11
    assert batches.stats() == {"batch_size_mean": None, "batch_size_hist": {}, "batch_timeout_rate": None}


def test_batch_log_counts_requests_past_their_batch_timeout_among_all_that_left_the_queue():
    clock = FakeClock()
    batches = BatchLog(window_s=10, clock=clock)
    batches.observe("short", 4)
    batches.observe("short", 4)
    batches.observe_timeouts("short", 3, 0)  # three of the second batch waited past their timeout
    batches.observe_timeouts("short", 0, 2)  # two gave up after the queue timeout, never in a batch
    stats = batches.stats()
    assert stats["batch_timeout_rate"] == pytest.approx(5 / 10)
    assert stats["batch_size_mean"] == 4 and stats["batch_size_hist"] == {"4": 2}


def test_admission_reports_requests_that_waited_past_their_batch_timeout():
    """Two slots, both held: a third request waits out its 20 ms batch timeout and more for a slot (overdue);
    a fourth waits the whole 0.3 s queue timeout and is refused (overdue too). A request that finds a free
    slot at once is not."""
    seen = []

    async def scenario():
        admission = Admission(0.3, max_in_flight=2)
        admission.on_batch_timeouts = lambda queue, overdue, refused: seen.append((queue, overdue, refused))
        section = {"timeout_ms": 20, "min_size": 1}
        release = asyncio.Event()

        async def hold():
            async with admission.admitted(prompt_tokens=10, batch=section):
                await release.wait()

        async def late():
            async with admission.admitted(prompt_tokens=10, batch=section):
                pass

        holders = [asyncio.create_task(hold()) for _ in range(2)]
        await asyncio.sleep(0.01)
        waiting = asyncio.create_task(late())
        await asyncio.sleep(0.1)  # past 2 x 20 ms
        release.set()
        await asyncio.gather(*holders, waiting)
        assert seen == [("short", 1, 0)]
        release.clear()
        holders = [asyncio.create_task(hold()) for _ in range(2)]
        await asyncio.sleep(0.01)
        with pytest.raises(QueueTimeout):
            await late()
        release.set()
        await asyncio.gather(*holders)

    asyncio.run(scenario())
    assert seen == [("short", 1, 0), ("short", 0, 1)]


def test_admission_reports_every_released_batch():
    seen = []

    async def scenario():
        admission = Admission(5)
        admission.on_batch = lambda queue, size: seen.append((queue, size))
        async with admission.admitted(prompt_tokens=10):
            pass
        async with admission.admitted(prompt_tokens=5000):
            pass

    asyncio.run(scenario())
    assert seen == [("short", 1), ("long", 1)]


# --- a real agent ----------------------------------------------------------------------------------------------


def get_json(url: str) -> dict:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return json.loads(exc.read())


def post_chat(url: str, text: str, *, stream=False, headers=None) -> int:
    body = {"model": "simulated-chat-model", "messages": [{"role": "user", "content": text}], "stream": stream}
    request = urllib.request.Request(
        f"{url}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {TEST_CLIENT_KEY}", **(headers or {})},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            response.read()
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.mark.agents
def test_a_standalone_agent_samples_what_it_served(tmp_path_factory):
    # Batches of one, two requests on the engine at a time and a queue of two: a burst of 12 gets some 429s.
    node = start_node(
        tmp_path_factory,
        "telemetry-node",
        params={"speculative": NGRAM, "batch": {"max_size": 1, "max_queue": 2}, "engine": {"max_num_seqs": 2}},
    )
    try:
        texts = ["我的订单到哪了？", "有什么适合送女朋友的生日礼物推荐吗", "what's your return policy?"]
        with ThreadPoolExecutor(12) as pool:
            burst = list(pool.map(lambda i: post_chat(node.url, texts[i % 3]), range(12)))
        assert 429 in burst and 200 in burst, burst
        for i in range(4):
            assert post_chat(node.url, texts[i % 3], stream=True) == 200
        assert post_chat(node.url, "hello", headers={"X-Business-Tag": "legal"}) == 200

        def served_sample():
            sample = node.health().get("sample")
            return sample if sample and sum(sample["m"]["tiers"].values()) == 17 else None

        sample = wait_until(served_sample, 10, "a sample counting the 17 requests")
        metrics_text = urllib.request.urlopen(f"{node.url}/metrics", timeout=10).read()
    finally:
        node.stop()

    m = sample["m"]
    assert tuple(m) == SAMPLE_KEYS
    assert time.time() - 15 < sample["t"] <= time.time() and sample["window_s"] == 10
    rejected = burst.count(429)
    assert m["qps"] > 0
    assert m["rejected_rate"] == pytest.approx(rejected / 17) and m["error_rate"] == 0
    assert 0 < m["latency_p50_s"] <= m["latency_p99_s"] <= m["latency_p999_s"] < 30
    assert 0 < m["ttft_p50_s"] <= m["ttft_p99_s"] < m["latency_p999_s"]
    assert sum(m["length_hist"].values()) == 17 - rejected and m["long_request_share"] == 0
    assert m["intents"].get("tag") == 1 and sum(m["intents"].values()) == 17
    assert m["tiers"]["strict"] >= 1 and m["tiers"]["creative"] >= 1
    # Every request but the tagged one went through the classifier, refused ones too.
    assert m["intent_classified"] == 16 == sum(m["intent_confidence_hist"].values())
    assert 0 <= m["intent_below_floor_share"] <= 1
    assert set(m["batch_size_hist"]) == {"1"} and m["batch_size_mean"] == 1
    assert m["queue_depth_short"] == 0 and m["queue_depth_long"] == 0
    assert m["batch_efficiency"] is not None and 0 <= m["batch_idle_ratio"] <= 1
    assert m["requests_running"] is not None and m["requests_waiting"] is not None
    assert 0 <= m["kv_cache_usage"] <= 1 and 0 <= m["fragmentation_ratio"] <= 1
    assert 0 < m["spec_acceptance_rate"] < 1 and m["spec_rejection_rate"] == pytest.approx(
        1 - m["spec_acceptance_rate"]
    )
    assert m["sm_util"] is None and m["absent"]["sm_util"]
    assert "fragmentation_ratio" not in m["absent"]  # the simulator's own (simulated) series
    if not gpu_inventory():
        # The simulator's pretend GPU (simulated figures): it computed while serving, and vLLM's reservation
        # (--gpu-memory-utilization) is what its memory holds with nothing leaking.
        assert 0 < m["gpu_util"] <= 1 and "gpu_util" not in m["absent"]
        assert m["gpu_memory_used"] == pytest.approx(0.9)
    # Requests of the burst that waited past twice the batch timeout are counted; how many depends on the machine's
    # speed (test_fault_detectors.py scripts the case where it must be high).
    assert 0 <= m["batch_timeout_rate"] <= 1
    assert m["degraded"] == 0 and m["engine_restarts"] == 0

    text = metrics_text.decode()
    for name in ("engine_node_chat_request_duration_seconds_count", "engine_node_chat_request_tokens_count"):
        line = next(line for line in text.splitlines() if line.startswith(name))
        assert float(line.split()[-1]) == 17 - rejected
    assert "engine_node_chat_time_to_first_token_seconds_count 4.0" in text and "engine_node_degraded 0.0" in text
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (Debian package `prometheus`)")
    result = subprocess.run([promtool, "check", "metrics"], input=metrics_text, capture_output=True, timeout=30)
    assert result.returncode in (0, 3), result.stderr
    problems = [line for line in (result.stdout + result.stderr).decode().splitlines() if line.strip()]
    assert all(line.endswith("metric names should not contain ':'") for line in problems), problems


def test_the_agent_shrugs_off_error_replies_and_logs_each_once(tmp_path, caplog):
    from engine_node.agent import Agent
    from engine_node.settings import AgentSettings

    settings = AgentSettings(
        control_plane_url="", token="", node_name="n1", backend="simulator", model="m", served_model_name="chat",
        state_dir=tmp_path,
    )  # fmt: skip

    async def scenario():
        agent = Agent(settings)
        for _ in range(3):
            await agent.on_message({"type": "error", "error": "unknown message type 'sample'"})
        await agent.on_message({"type": "error", "error": "something else"})
        return agent

    with caplog.at_level("DEBUG", logger="engine_node.agent"):
        agent = asyncio.run(scenario())
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warnings == [
        "control plane replied with an error: unknown message type 'sample'",
        "control plane replied with an error: something else",
    ]
    assert agent.health()["sample"] is None  # nothing built before the agent runs


def test_the_configured_sample_window_sizes_every_log_and_is_sent_with_each_sample(tmp_path):
    from engine_node.agent import Agent
    from engine_node.settings import AgentSettings

    settings = AgentSettings(
        control_plane_url="", token="", node_name="n1", backend="simulator", model="m", served_model_name="chat",
        state_dir=tmp_path, sample_window_s=3.0,
    )  # fmt: skip

    async def scenario():
        return Agent(settings)

    agent = asyncio.run(scenario())
    telemetry = agent.telemetry
    assert agent.requests.window_s == telemetry.batches.window_s == telemetry.scraper.window_s == 3.0
    assert telemetry.build_sample()["window_s"] == 3.0
