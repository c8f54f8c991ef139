"""The agent's 1 Hz metric sample: what the agent reads from its engine's /metrics and from the GPU (nvidia-smi),
and a sample built with nothing known.
"""

import asyncio
import json
import os
import socket
from pathlib import Path

import pytest

from engine_node.admission import Admission
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
from tests.engine_node.simulator.conftest import Simulator, chat_body
from tests.engine_node.test_telemetry import FakeClock

FIXTURE = Path(__file__).parent / "fixtures" / "vllm_0_32_metrics.txt"
# vLLM's per-request time per output token in that exposition (9 requests).
TPOT_SUM, TPOT_COUNT = 0.024768084724296924, 9.0


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


@pytest.mark.subprocess
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


@pytest.mark.subprocess
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
