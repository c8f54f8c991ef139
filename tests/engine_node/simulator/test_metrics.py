"""/metrics carries vLLM 0.32's series (names, types, labels, buckets), moves with traffic, and passes promtool."""

import shutil
import subprocess

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.engine_node.simulator.conftest import chat_body

pytestmark = pytest.mark.subprocess

EXPECTED_TYPES = {
    "vllm:num_requests_running": "gauge",
    "vllm:num_requests_waiting": "gauge",
    "vllm:kv_cache_usage_perc": "gauge",
    "vllm:engine_sleep_state": "gauge",
    "vllm:cache_config_info": "gauge",
    "sim:memory_fragmentation_ratio": "gauge",
    "vllm:num_preemptions": "counter",
    "vllm:prompt_tokens": "counter",
    "vllm:generation_tokens": "counter",
    "vllm:request_success": "counter",
    "vllm:prefix_cache_queries": "counter",
    "vllm:prefix_cache_hits": "counter",
    "vllm:time_to_first_token_seconds": "histogram",
    "vllm:inter_token_latency_seconds": "histogram",
    "vllm:request_time_per_output_token_seconds": "histogram",
    "vllm:e2e_request_latency_seconds": "histogram",
    "vllm:request_queue_time_seconds": "histogram",
    "vllm:request_inference_time_seconds": "histogram",
    "vllm:request_prefill_time_seconds": "histogram",
    "vllm:request_decode_time_seconds": "histogram",
    "vllm:request_prompt_tokens": "histogram",
    "vllm:request_generation_tokens": "histogram",
    "vllm:request_params_max_tokens": "histogram",
}
TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                40.0, 80.0, 160.0, 640.0, 2560.0]  # fmt: skip


def _families(simulator) -> dict:
    text = simulator.get("/metrics").body.decode("utf-8")
    return {family.name: family for family in text_string_to_metric_families(text)}


def test_vllm_series_have_vllms_types_labels_and_simulated_help(simulator):
    families = _families(simulator)

    for name, kind in EXPECTED_TYPES.items():
        assert families[name].type == kind, name
        assert "(simulated)" in families[name].documentation, name
        for sample in families[name].samples:
            assert sample.labels["engine"] == "0"
            if name != "vllm:cache_config_info":
                assert sample.labels["model_name"] == "chat"
    reasons = {
        s.labels["finished_reason"] for s in families["vllm:request_success"].samples if s.name.endswith("_total")
    }
    assert reasons == {"stop", "length", "abort"}


def test_histogram_buckets_are_vllms(simulator):
    families = _families(simulator)

    def bounds(name: str) -> list[float]:
        return [float(s.labels["le"]) for s in families[name].samples if s.name.endswith("_bucket")][:-1]

    assert bounds("vllm:time_to_first_token_seconds") == TTFT_BUCKETS
    assert bounds("vllm:inter_token_latency_seconds")[:3] == [0.01, 0.025, 0.05]
    assert bounds("vllm:e2e_request_latency_seconds")[-1] == 7680.0
    # 1-2-5 buckets up to --max-model-len 4096.
    assert bounds("vllm:request_prompt_tokens") == [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000]


def test_counters_and_histograms_move_with_requests(simulator):
    before = simulator.metrics()
    streamed, _ = simulator.stream("/v1/chat/completions", chat_body("count me", max_tokens=5))
    assert streamed.status == 200
    assert simulator.chat("and me", max_tokens=5).status == 200
    after = simulator.metrics()

    def delta(name: str, **labels: str) -> float:
        def total(samples):
            wanted = set(labels.items())
            return sum(v for (n, lbl), v in samples.items() if n == name and wanted <= lbl)

        return total(after) - total(before)

    assert delta("vllm:generation_tokens_total") == 10
    assert delta("vllm:prompt_tokens_total") == 2 * 7  # "count me" and "and me": 2 tokens + 5 template tokens each
    assert delta("vllm:request_success_total", finished_reason="length") == 2
    assert delta("vllm:time_to_first_token_seconds_count") == 2
    assert delta("vllm:e2e_request_latency_seconds_count") == 2
    assert delta("vllm:inter_token_latency_seconds_count") == 8
    assert delta("vllm:request_generation_tokens_sum") == 10
    assert delta("vllm:prefix_cache_queries_total") == 14


def test_exposition_passes_promtool_except_for_vllms_colon_names(simulator):
    simulator.chat("warm up", max_tokens=2)
    text = simulator.get("/metrics").body
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (Debian package `prometheus`)")

    result = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, timeout=30)

    # Exit 3 is "lint problems"; 1 would be an exposition promtool cannot parse.
    assert result.returncode in (0, 3), result.stderr
    problems = [line for line in (result.stdout + result.stderr).decode().splitlines() if line.strip()]
    assert all(line.endswith("metric names should not contain ':'") for line in problems), problems
