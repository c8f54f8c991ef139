"""The simulated engine: continuous batching, KV preemption, prefix caching, speculative decoding, determinism,
fragmentation and the dev-mode endpoints that reset it."""

import http.client
import json
import time

import pytest

from tests.engine_node.simulator.conftest import chat_body

pytestmark = pytest.mark.subprocess

# Blocks of 16 one-byte tokens, so kv_cache_bytes / 16 is the block count at --gpu-memory-utilization 1.
SMALL_CACHE = {"max_position_embeddings": 256, "kv_cache": {"block_size": 16, "bytes_per_token": 1}}


def _spec_counters(simulator) -> dict:
    metrics = simulator.metrics()
    per_pos = sorted(
        (int(dict(labels)["position"]), value)
        for (name, labels), value in metrics.items()
        if name == "vllm:spec_decode_num_accepted_tokens_per_pos_total"
    )
    return {
        "drafts": simulator.metric("vllm:spec_decode_num_drafts_total"),
        "draft_tokens": simulator.metric("vllm:spec_decode_num_draft_tokens_total"),
        "accepted": simulator.metric("vllm:spec_decode_num_accepted_tokens_total"),
        "per_pos": [value for _, value in per_pos],
    }


def test_concurrent_requests_share_steps_up_to_max_num_seqs(start_simulator):
    simulator = start_simulator(profile={"latency": {"time_scale": 1.0}}, args=("--max-num-seqs", "4"))

    results = simulator.chat_many([chat_body(f"user {i}", max_tokens=20, ignore_eos=True) for i in range(6)])

    assert [r.json["usage"]["completion_tokens"] for r in results] == [20] * 6
    state = simulator.state()
    assert state["max_running_observed"] == 4
    # Served one at a time, 6 requests of 20 tokens would take at least 120 steps.
    assert state["steps"] < 120


def test_full_kv_cache_preempts_and_recomputes_without_changing_replies(start_simulator):
    profile = {**SMALL_CACHE, "kv_cache": {**SMALL_CACHE["kv_cache"], "kv_cache_bytes": 16 * 16}}
    simulator = start_simulator(profile={**profile, "latency": {"time_scale": 0.05}},
                                args=("--gpu-memory-utilization", "1.0"))  # fmt: skip
    bodies = [chat_body(f"request {i}", max_tokens=150, ignore_eos=True) for i in range(6)]

    concurrent = simulator.chat_many(bodies)

    assert simulator.metric("vllm:num_preemptions_total") > 0
    assert simulator.state()["preemptions"] > 0
    alone = [simulator.post("/v1/chat/completions", body) for body in bodies]
    assert [r.json["usage"]["completion_tokens"] for r in concurrent] == [150] * 6
    assert [r.json["choices"][0]["message"]["content"] for r in concurrent] == [
        r.json["choices"][0]["message"]["content"] for r in alone
    ]
    assert simulator.metric("vllm:kv_cache_usage_perc") == 0


def test_prefix_cache_hits_repeated_prompts_until_reset(simulator):
    prompt = "The same long system prompt, repeated by every request of a chat product. " * 4

    def hits_after_one_request() -> float:
        before = simulator.metric("vllm:prefix_cache_hits_total")
        assert simulator.chat(prompt, max_tokens=2).status == 200
        return simulator.metric("vllm:prefix_cache_hits_total") - before

    hits_after_one_request()
    assert hits_after_one_request() >= 64
    assert simulator.post("/reset_prefix_cache").status == 200
    assert hits_after_one_request() == 0


def test_speculative_decoding_accepts_the_configured_share_of_drafts(start_simulator):
    spec = json.dumps({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4})
    simulator = start_simulator(
        profile={"speculative": {"acceptance_rate": 0.6}, "latency": {"time_scale": 0.01}},
        args=("--speculative-config", spec),
    )

    results = simulator.chat_many([chat_body(f"draft {i}", max_tokens=250, ignore_eos=True) for i in range(8)])
    _, payloads = simulator.stream("/v1/chat/completions", chat_body("streamed", max_tokens=60, ignore_eos=True))

    assert [r.json["usage"]["completion_tokens"] for r in results] == [250] * 8
    counters = _spec_counters(simulator)
    assert counters["drafts"] > 500
    assert counters["draft_tokens"] == 3 * counters["drafts"]
    assert counters["accepted"] / counters["draft_tokens"] == pytest.approx(0.6, abs=0.05)
    per_pos = counters["per_pos"]
    assert len(per_pos) == 3
    assert sum(per_pos) == counters["accepted"]
    assert per_pos[0] > per_pos[1] > per_pos[2] > 0  # the first rejection ends a draft
    # Several tokens per step: far fewer content chunks than tokens.
    assert len(payloads) - 3 < 45


def test_same_seed_and_requests_give_the_same_counts_texts_and_acceptances(start_simulator):
    spec = json.dumps({"method": "draft_model", "model": "draft", "num_speculative_tokens": 2})
    bodies = [chat_body(f"question {i}: " + "why " * i, max_tokens=10 + 5 * i) for i in range(8)]

    def run(seed: str) -> tuple[list, dict]:
        simulator = start_simulator(args=("--seed", seed, "--speculative-config", spec, "--max-num-seqs", "3"))
        replies = [
            (r.json["usage"]["completion_tokens"], r.json["choices"][0]["finish_reason"],
             r.json["choices"][0]["message"]["content"])
            for r in simulator.chat_many(bodies)
        ]  # fmt: skip
        return replies, _spec_counters(simulator)

    first, second, other_seed = run("11"), run("11"), run("12")

    assert first == second
    assert {reason for _, reason, _ in first[0]} == {"stop", "length"}
    assert [text for *_, text in first[0]] != [text for *_, text in other_seed[0]]


def test_fragmentation_rises_with_mixed_lengths_and_drops_after_sleep_and_wake_up(start_simulator):
    profile = {**SMALL_CACHE, "kv_cache": {**SMALL_CACHE["kv_cache"], "kv_cache_bytes": 128 * 16}}
    simulator = start_simulator(profile={**profile, "latency": {"time_scale": 0.05}, "fragmentation": {"floor": 0.02}},
                                args=("--gpu-memory-utilization", "1.0"))  # fmt: skip

    def stats() -> dict:
        result = simulator.post("/collective_rpc", {"method": "fragmentation_stats"})
        assert result.status == 200
        return result.json

    assert stats()["fragmentation"] == 0.02
    simulator.chat("alone", max_tokens=100, ignore_eos=True)
    assert stats()["fragmentation"] == 0.02  # one sequence's blocks are contiguous and freed together

    simulator.chat_many([chat_body(f"mixed {n}", max_tokens=n, ignore_eos=True) for n in (8, 200, 16, 150, 4, 100)])
    fragmented = stats()
    assert fragmented["fragmentation"] > 0.05
    assert fragmented["inactive_split_bytes"] == round(fragmented["fragmentation"] * fragmented["reserved_bytes"])
    assert fragmented["results"] == [{k: v for k, v in fragmented.items() if k != "results"}]
    assert simulator.metric("sim:memory_fragmentation_ratio") == fragmented["fragmentation"]

    assert simulator.post("/reset_prefix_cache").status == 200
    assert simulator.post("/sleep?level=1").status == 200
    assert simulator.get("/is_sleeping").json == {"is_sleeping": True}
    assert simulator.metric("vllm:engine_sleep_state", sleep_state="weights_offloaded") == 1
    assert simulator.chat("while asleep", max_tokens=2).status == 503
    assert simulator.post("/wake_up").status == 200
    assert simulator.get("/is_sleeping").json == {"is_sleeping": False}
    assert stats()["fragmentation"] == 0.02
    assert simulator.chat("awake again", max_tokens=2).status == 200


def test_collective_rpc_refuses_other_methods(simulator):
    result = simulator.post("/collective_rpc", {"method": "save_sharded_state"})

    assert result.status == 400
    assert result.json["error"]["code"] == 400


def test_client_that_leaves_mid_stream_is_aborted_and_frees_its_seat(start_simulator):
    simulator = start_simulator(profile={"latency": {"time_scale": 1.0}})
    connection = http.client.HTTPConnection("127.0.0.1", simulator.port, timeout=5)
    body = chat_body("long answer please", max_tokens=2000, ignore_eos=True, stream=True)
    connection.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    response = connection.getresponse()
    assert response.status == 200
    response.read1(200)
    assert simulator.state()["running"] == 1

    connection.close()

    deadline = time.monotonic() + 5
    while simulator.state()["running"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert simulator.state()["running"] == 0
    assert simulator.metric("vllm:request_success_total", finished_reason="abort") == 1
    assert simulator.metric("vllm:kv_cache_usage_perc") == 0


def test_a_long_context_slows_every_decode_step_when_kv_reads_are_priced(start_simulator):
    """With decode_per_kv_token_ms a reply over a 2,000-token prompt decodes slower than one over a short prompt; the
    default profile prices no KV read, so there they differ only by the longer prefill (~0.02 s here)."""
    long_prompt = "订单" * 1000  # 2,000 simulated tokens
    timings = {}
    for name, price in (("free", 0.0), ("priced", 0.002)):
        simulator = start_simulator(profile={"latency": {"time_scale": 0.2, "decode_per_kv_token_ms": price}})
        for prompt in ("hi", long_prompt):
            started = time.monotonic()
            reply = simulator.post("/v1/chat/completions", chat_body(prompt, max_tokens=200, ignore_eos=True))
            timings[name, len(prompt) > 2] = time.monotonic() - started
            assert reply.json["usage"]["completion_tokens"] == 200
    # 199 steps of 2,000+ context tokens at 0.002 ms each: +4 ms per step, x0.2 time scale = +0.16 s.
    assert timings["priced", True] - timings["priced", False] > 0.12, timings
    assert abs(timings["free", True] - timings["free", False]) < 0.06, timings
