"""The simulator's model pieces in-process: token estimate, reply text, draft acceptance, KV blocks, profiles."""

import json
import math
import random
import statistics

import pytest

from engine_node.simulator.kvcache import BlockPool
from engine_node.simulator.model import LatencyModel, SpeculativeConfig, SpeculativeSampler, expected_acceptance
from engine_node.simulator.profile import DEMO_PROFILE_PATH, ProfileError, load_profile
from engine_node.simulator.text import ReplyWriter, chat_pieces, text_pieces


def test_token_estimate_is_one_per_cjk_character_and_one_per_four_ascii_characters():
    assert len(text_pieces("abcd")) == 1
    assert len(text_pieces("abcde")) == 2
    assert len(text_pieces("你好世界")) == 4
    assert len(text_pieces("hi 你好 there")) == 1 + 2 + 2
    assert len(chat_pieces([{"role": "user", "content": [{"type": "text", "text": "abcdefgh"}]}])) == 2 + 3 + 2


@pytest.mark.parametrize("seed", range(20))
def test_reply_writer_ends_a_sentence_on_stop_and_mid_sentence_on_length(seed):
    stopped = ReplyWriter(random.Random(seed), 30, "stop")
    cut = ReplyWriter(random.Random(seed), 30, "length")

    stopped_text = stopped.take(10) + stopped.take(20)
    cut_text = "".join(cut.take(1) for _ in range(30))

    assert stopped_text.endswith((".", "。"))
    assert not stopped_text.endswith(("..", "。。", ",.", "，。"))
    assert not cut_text.endswith((".", "。", ",", "，"))


def test_draft_acceptance_share_matches_the_profile_rate():
    sampler = SpeculativeSampler(acceptance_rate=0.7, num_speculative_tokens=4)
    rng = random.Random(1)

    accepted = [sampler.accepted(rng) for _ in range(20000)]

    assert expected_acceptance(sampler.position_acceptance, 4) == pytest.approx(0.7)
    assert sum(accepted) / (4 * len(accepted)) == pytest.approx(0.7, abs=0.01)
    assert max(accepted) == 4
    assert SpeculativeSampler(0.0, 3).accepted(rng) == 0
    assert SpeculativeSampler(1.0, 3).accepted(rng) == 3


def test_speculative_config_accepts_vllm_json_and_refuses_nonsense():
    assert SpeculativeConfig.parse('{"model": "d", "num_speculative_tokens": 2}').method == "draft_model"
    for raw in (
        "[]",
        "{bad",
        '{"method": "ngram", "num_speculative_tokens": 0}',
        '{"method": "magic", "num_speculative_tokens": 1}',
    ):
        with pytest.raises(ValueError):
            SpeculativeConfig.parse(raw)


def test_step_cost_grows_with_batch_and_scales_with_quantization_and_speculation():
    profile = load_profile(env={})
    plain = LatencyModel(profile, None, None)
    fp8 = LatencyModel(profile, "fp8", None)
    spec = LatencyModel(profile, None, SpeculativeConfig("ngram", 3))

    assert plain.step_seconds(0, 8) == pytest.approx((9.0 + 0.8 * 8) / 1000)
    assert plain.step_seconds(500, 0) == pytest.approx((8.0 + 0.05 * 500) / 1000)
    assert fp8.step_seconds(0, 8) == pytest.approx(0.8 * plain.step_seconds(0, 8))
    assert spec.step_seconds(0, 8) == pytest.approx(1.3 * plain.step_seconds(0, 8))
    assert plain.step_seconds(0, 8, latency_factor=3) == pytest.approx(3 * plain.step_seconds(0, 8))


def test_decode_step_reads_the_kv_of_its_sequences_when_the_profile_prices_it(tmp_path):
    """decode_per_kv_token_ms: memory-bound attention, a cost per context token the decoding batch attends over."""
    assert load_profile(env={}).decode_per_kv_token_ms == 0.0
    plain = LatencyModel(load_profile(env={}), None, None)
    assert plain.step_seconds(0, 8, kv_tokens=50_000) == plain.step_seconds(0, 8)  # today's behaviour by default

    priced = tmp_path / "kv.yaml"
    priced.write_text("latency:\n  decode_per_kv_token_ms: 0.0001\n", encoding="utf-8")
    model = LatencyModel(load_profile(priced, env={}), None, SpeculativeConfig("ngram", 3))
    assert model.step_seconds(0, 8, kv_tokens=10_000) == pytest.approx((9.0 + 0.8 * 8 + 1.0) * 1.3 / 1000)
    assert model.step_seconds(100, 0, kv_tokens=10_000) == pytest.approx((8.0 + 0.05 * 100) / 1000)  # no decode

    priced.write_text("latency:\n  decode_per_kv_token_ms: -1\n", encoding="utf-8")
    with pytest.raises(ProfileError, match=r"latency\.decode_per_kv_token_ms"):
        load_profile(priced, env={})


def test_block_pool_counts_only_holes_left_below_live_blocks():
    pool = BlockPool(num_blocks=10, block_size=16, bytes_per_block=100, fragmentation_floor=0.1)
    assert pool.grow(1, 32) and pool.grow(2, 16) and pool.grow(3, 48)  # blocks 0-1, 2, 3-5
    assert not pool.grow(4, 80)  # 5 blocks wanted, 4 free: nothing is taken
    assert pool.num_free == 4

    pool.release(1)
    pool.release(2)
    pool.note_holes()
    assert pool.stranded_blocks == 3
    assert pool.fragmentation == pytest.approx(0.1 + 0.9 * 3 / 10)
    assert pool.fragmentation_stats()["allocated_bytes"] == 300

    pool.release(3)
    pool.note_holes()
    assert pool.fragmentation > 0.1  # the allocator keeps split segments until memory is released
    pool.release_memory()
    assert pool.fragmentation == 0.1


def test_partial_profile_keeps_defaults_and_bad_values_are_refused(tmp_path):
    partial = tmp_path / "p.yaml"
    partial.write_text("latency:\n  time_scale: 0.1\n", encoding="utf-8")
    profile = load_profile(partial, env={})
    assert profile.time_scale == 0.1
    assert profile.decode_base_ms == 9.0

    partial.write_text("reply_length:\n  min: 10\n  max: 5\n", encoding="utf-8")
    with pytest.raises(ProfileError, match=r"reply_length\.max"):
        load_profile(partial, env={})
    with pytest.raises(ProfileError, match="faults: unknown keys"):
        load_profile(env={"SIMULATOR_FAULTS": '{"meltdown": true}'})


def test_demo_profile_delivers_the_field_reports_latency_and_reply_lengths():
    """profiles/demo.yaml (make run's fleet): a capped 256-token reply stays well under the seed's 1.6 s P99 warning at
    the demo's load and the warmup's concurrency, and under 1.4 s (the report's tuned P99) with ~40 sequences running;
    reply lengths have the report's shares (91 % <= 256 tokens, 0.7 % > 512)."""
    profile = load_profile(DEMO_PROFILE_PATH, env={})
    model = LatencyModel(profile, None, None)

    def reply_s(tokens: int, running: int, prompt_tokens: int = 40) -> float:
        # Its neighbours are mid-reply on average (~110 context tokens); its own context grows from the prompt.
        steps = (
            model.step_seconds(0, running, kv_tokens=(running - 1) * 110 + prompt_tokens + i) for i in range(tokens - 1)
        )
        return model.step_seconds(prompt_tokens, 0) + sum(steps)

    assert max(reply_s(256, running) for running in (1, 2, 3, 4)) < 0.8
    assert reply_s(256, 40) < 1.4
    # The report's "~40 % of compute time in KV cache memory access" at its load (~40 sequences of ~110 tokens).
    step = model.step_seconds(0, 40, kv_tokens=40 * 110)
    assert (step - model.step_seconds(0, 40)) / step == pytest.approx(0.4, abs=0.05)
    # The default profile, sized for a slower GPU, needs more than the warmup check's 2.0 s for the same reply.
    assert LatencyModel(load_profile(env={}), None, None).step_seconds(0, 2) * 255 > 2.0

    lengths = statistics.NormalDist(math.log(profile.reply_median), profile.reply_sigma)
    assert lengths.cdf(math.log(256)) == pytest.approx(0.91, abs=0.005)
    assert 1 - lengths.cdf(math.log(512)) == pytest.approx(0.007, abs=0.001)


def test_batch_schedule_follows_vllms_rules():
    config = SpeculativeConfig.parse(
        json.dumps(
            {
                "method": "ngram",
                "num_speculative_tokens": 4,
                "num_speculative_tokens_per_batch_size": [[1, 4, 4], [9, 16, 2]],
            }
        )
    )
    assert [config.tokens_at(b) for b in (1, 4, 5, 8, 9, 16, 40)] == [4, 4, 4, 4, 2, 2, 2]
    for bad, message in (
        ([], "must be a non-empty list"),
        ([[2, 4, 3]], "must start at 1"),
        ([[1, 4, 3], [3, 8, 1]], "non-overlapping"),
        ([[1, 4, -1]], ">= 0"),
        ([[1, 4]], "3-item sequence"),
    ):
        raw = json.dumps({"method": "ngram", "num_speculative_tokens": 3, "num_speculative_tokens_per_batch_size": bad})
        with pytest.raises(ValueError, match=message):
            SpeculativeConfig.parse(raw)
    with pytest.raises(ValueError, match="prompt_lookup_min=5 must be <= prompt_lookup_max=2"):
        SpeculativeConfig.parse(
            json.dumps({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 5, "prompt_lookup_max": 2})
        )


def test_sampler_takes_another_rate_and_draft_length_when_asked():
    sampler = SpeculativeSampler(acceptance_rate=0.9, num_speculative_tokens=3)
    rng = random.Random(7)
    low = [sampler.accepted(rng, acceptance_rate=0.1) for _ in range(4000)]
    assert sum(low) / (3 * len(low)) == pytest.approx(0.1, abs=0.02)
    assert max(sampler.accepted(rng, draft=1) for _ in range(200)) == 1


def test_spec_decode_log_line_is_vllms(caplog):
    """The periodic "SpecDecoding metrics: ..." line in vLLM 0.32's wording (vllm/v1/spec_decode/metrics.py)."""
    from engine_node.simulator.runtime import Simulator, SimulatorSettings

    settings = SimulatorSettings(
        host="127.0.0.1", port=0, model="m", served_model_names=["m"], max_num_seqs=4, max_num_batched_tokens=64,
        gpu_memory_utilization=0.5, max_model_len=1024, quantization=None, enable_prefix_caching=False,
        speculative=SpeculativeConfig("ngram", 3), seed=0, log_requests=False,
    )  # fmt: skip
    engine = Simulator(settings, load_profile()).engine
    engine._logged_drafts = [10, 30, 15, [8, 5, 2]]
    with caplog.at_level("INFO"):
        engine._log_drafts(10.0)
        engine._log_drafts(10.0)  # nothing drafted since: no line
    lines = [r.getMessage() for r in caplog.records if "SpecDecoding" in r.getMessage()]
    assert lines == [
        "SpecDecoding metrics: Mean acceptance length: 2.50, Accepted throughput: 1.50 tokens/s, Drafted throughput: "
        "3.00 tokens/s, Accepted: 15 tokens, Drafted: 30 tokens, Per-position acceptance rate: 0.800, 0.500, 0.200, "
        "Avg Draft acceptance rate: 50.0% (simulated)"
    ]
