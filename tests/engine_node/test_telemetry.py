"""The agent's 1 Hz metric sample: request and batch windows, the engine scrape, and a real agent's sample.

The last tests run `python -m engine_node` on the simulator (standalone, no control plane), send it chat requests
and read the sample the agent built from its `/healthz` debug view, and check its `/metrics` with promtool.
"""

import asyncio
import json
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from engine_node.admission import Admission, QueueTimeout
from engine_node.gpus import gpu_inventory
from engine_node.telemetry import (
    SAMPLE_KEYS,
    BatchLog,
    EngineScraper,
    GpuUtilisation,
    RequestLog,
    SmActivity,
    Telemetry,
    parse_engine_metrics,
)
from engine_node.telemetry.gpu import parse_utilisation
from engine_node.telemetry.requests import percentile
from tests.engine_node.fleet import TEST_CLIENT_KEY, wait_until
from tests.engine_node.simulator.conftest import Simulator, chat_body
from tests.engine_node.test_gateway_policy import start_node

FIXTURE = Path(__file__).parent / "fixtures" / "vllm_0_32_metrics.txt"
# vLLM's per-request time per output token in that exposition (9 requests).
TPOT_SUM, TPOT_COUNT = 0.024768084724296924, 9.0
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


# --- the engine's /metrics -------------------------------------------------------------------------------------


def test_parses_vllm_0_32_exposition():
    figures = parse_engine_metrics(FIXTURE.read_text(encoding="utf-8"))
    assert figures == {
        "requests_running": 0.0,
        "requests_waiting": 0.0,  # vllm:num_requests_waiting_by_reason is not added in
        "kv_cache_usage": 0.0,
        "fragmentation_ratio": None,  # vLLM has no such series
        "draft_tokens": None,  # no speculative decoding in that server
        "accepted_tokens": None,
        "sim_gpu_util": None,  # the simulator's own, for its pretend GPU
        "sim_gpu_memory_used": None,
        "tpot_sum": pytest.approx(TPOT_SUM),
        "tpot_count": TPOT_COUNT,
    }


def test_sums_engines_and_averages_their_usage():
    text = FIXTURE.read_text(encoding="utf-8").replace(
        'vllm:num_requests_running{engine="0",model_name="tiny"} 0.0',
        'vllm:num_requests_running{engine="0",model_name="tiny"} 3.0\n'
        'vllm:num_requests_running{engine="1",model_name="tiny"} 4.0',
    )
    text = text.replace(
        'vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.0',
        'vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.2\n'
        'vllm:kv_cache_usage_perc{engine="1",model_name="tiny"} 0.6',
    )
    figures = parse_engine_metrics(text)
    assert figures["requests_running"] == 7.0
    assert figures["kv_cache_usage"] == pytest.approx(0.4)


def _spec(drafted: float, accepted: float) -> dict:
    return {"requests_running": 1.0, "requests_waiting": 0.0, "kv_cache_usage": 0.1, "fragmentation_ratio": None,
            "draft_tokens": drafted, "accepted_tokens": accepted}  # fmt: skip


def test_spec_decode_rates_are_counter_deltas_over_the_window():
    clock = FakeClock()
    scraper = EngineScraper(lambda: "http://127.0.0.1:9", window_s=10, clock=clock)
    scraper.observe(_spec(1000, 900))  # history before the window: 90 % accepted
    assert scraper.spec_rates() == (None, None)  # one point is no delta
    for _ in range(10):
        clock.now += 1
        scraper.observe(_spec(scraper.latest["draft_tokens"] + 30, scraper.latest["accepted_tokens"] + 12))
    acceptance, rejection = scraper.spec_rates()
    assert acceptance == pytest.approx(0.4) and rejection == pytest.approx(0.6)
    # Nothing drafted for a whole window: unknown, not 0 or 1.
    clock.now += 11
    scraper.observe(scraper.latest)
    assert scraper.spec_rates() == (None, None)
    # An engine restart resets the counters: the old history is not subtracted from the new one.
    clock.now += 1
    scraper.observe(_spec(30, 27))
    assert scraper.spec_rates() == (None, None)
    clock.now += 1
    scraper.observe(_spec(60, 51))
    assert scraper.spec_rates()[0] == pytest.approx(24 / 30)
    # No spec decoding at all.
    scraper.observe(_spec(None, None))
    assert scraper.figures()["spec_acceptance_rate"] is None


def test_an_unreachable_engine_gives_nulls():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound and never listening: connections are refused
        scraper = EngineScraper(lambda: f"http://127.0.0.1:{port}", window_s=10)
        scraper.observe(_spec(30, 20))

        async def scrape():
            try:
                return await scraper.scrape()
            finally:
                await scraper.close()

        assert asyncio.run(scrape()) is None
    assert scraper.failures == 1
    assert set(scraper.figures().values()) == {None}


def test_nvidia_smi_lines():
    assert parse_utilisation("0, 87, 70000, 81920\n") == (0, 0.87, (70000.0, 81920.0))
    assert parse_utilisation("0, 87, [N/A], [N/A]") == (0, 0.87, None)
    assert parse_utilisation("0, 87") == (0, 0.87, None)
    assert parse_utilisation("1, [N/A], 100, 200") is None
    assert parse_utilisation("garbage") is None


FAKE_NVIDIA_SMI = """#!/bin/sh
# Answers only the agent's query; two GPUs at 30 % and 50 %, then one second later at 40 % and 60 %; memory
# 10 and 30 of 100 GiB, then 20 and 30.
[ "$1" = "--query-gpu=index,utilization.gpu,memory.used,memory.total" ] || exit 2
[ "$2" = "--format=csv,noheader,nounits" ] || exit 2
printf '0, 30, 10240, 102400\n1, 50, 30720, 102400\n'
sleep 1
printf '0, 40, 20480, 102400\n1, [N/A], 0, 102400\n1, 60, 30720, 102400\n'
sleep 30
"""


def test_gpu_utilisation_reads_a_long_running_nvidia_smi(tmp_path, monkeypatch):
    smi = tmp_path / "nvidia-smi"
    smi.write_text(FAKE_NVIDIA_SMI, encoding="utf-8")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")

    async def scenario():
        gpu = GpuUtilisation()
        gpu.start()
        try:
            readings = []
            for _ in range(40):
                await asyncio.sleep(0.1)
                value, memory = gpu.value(), gpu.memory_used()
                if value is not None and (not readings or (value, memory) != readings[-1]):
                    readings.append((round(value, 6), round(memory, 6)))
                if len(readings) == 2:
                    break
            return readings
        finally:
            await gpu.close()

    assert asyncio.run(scenario()) == [(0.4, 0.2), (0.5, 0.25)]


async def _scrape_twice(url: str, between) -> tuple[dict, dict, tuple]:
    scraper = EngineScraper(lambda: url, window_s=60)
    try:
        first = await scraper.scrape()
        await asyncio.to_thread(between)
        second = await scraper.scrape()
        return first, second, scraper.spec_rates()
    finally:
        await scraper.close()


def test_scrapes_the_simulator_with_speculative_decoding(tmp_path):
    spec = json.dumps({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4})
    simulator = Simulator(tmp_path, None, ("--served-model-name", "chat", "--speculative-config", spec), None)
    try:
        simulator.wait_ready()
        simulator.chat("warm up", max_tokens=4)

        def traffic():
            simulator.chat_many(
                [chat_body(f"tell me about item {i}", max_tokens=24, ignore_eos=True) for i in range(4)]
            )

        before = simulator.metric("vllm:spec_decode_num_draft_tokens_total")
        accepted_before = simulator.metric("vllm:spec_decode_num_accepted_tokens_total")
        first, second, (acceptance, rejection) = asyncio.run(_scrape_twice(simulator.url, traffic))
        drafted = simulator.metric("vllm:spec_decode_num_draft_tokens_total") - before
        accepted = simulator.metric("vllm:spec_decode_num_accepted_tokens_total") - accepted_before
    finally:
        simulator.stop()

    assert first["draft_tokens"] == before and second["draft_tokens"] == before + drafted
    assert acceptance == pytest.approx(accepted / drafted) and rejection == pytest.approx(1 - accepted / drafted)
    assert 0 < acceptance < 1  # the default profile accepts 70 % of draft tokens
    assert second["fragmentation_ratio"] is not None and 0 <= second["fragmentation_ratio"] <= 1
    assert second["kv_cache_usage"] is not None and second["requests_running"] == 0


def test_build_sample_has_every_key_even_with_nothing_known():
    clock = FakeClock()
    telemetry = Telemetry(
        requests=RequestLog(clock=clock),
        batches=BatchLog(clock=clock),
        admission=Admission(5),
        scraper=EngineScraper(lambda: "http://127.0.0.1:9", clock=clock),
        gpu=None,
        sm=SmActivity(has_gpu=False),
        fragmentation=None,
        degraded=lambda: False,
        engine_restarts=lambda: 0,
        wall=lambda: 1_700_000_000.5,
    )
    sample = telemetry.build_sample()
    assert sample["type"] == "sample" and sample["t"] == 1_700_000_000.5 and sample["window_s"] == 10
    assert tuple(sample["m"]) == SAMPLE_KEYS and len(SAMPLE_KEYS) == 34
    m = sample["m"]
    assert m["qps"] == 0 and m["queue_depth_short"] == 0 and m["degraded"] == 0 and m["engine_restarts"] == 0
    assert m["gpu_util"] is None and m["sm_util"] is None and m["kv_cache_usage"] is None
    assert m["batch_efficiency"] is None and m["batch_size_hist"] == {}
    assert m["absent"] == {
        "fragmentation_ratio": "the engine's /metrics did not answer",
        "gpu_util": "no NVIDIA GPU on this host",
        "sm_util": "no NVIDIA GPU on this host",
    }
    json.dumps(sample, allow_nan=False)  # a sample is always valid JSON: no NaN


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
