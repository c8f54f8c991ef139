"""Start-up behaviour of `python -m engine_node.simulator`: vLLM's flags and vLLM's refusals, with exit codes."""

import json

import pytest

pytestmark = pytest.mark.subprocess


def test_help_documents_every_vllm_flag_the_agent_passes(run_simulator):
    result = run_simulator(("--help",))

    assert result.returncode == 0
    for flag in (
        "--host", "--port", "--model", "--served-model-name", "--tokenizer", "--max-num-seqs",
        "--max-num-batched-tokens", "--gpu-memory-utilization", "--max-model-len", "--quantization",
        "--enable-prefix-caching", "--no-enable-prefix-caching", "--speculative-config", "--enforce-eager",
        "--enable-log-requests", "--profile", "--seed", "--revision", "--tokenizer-revision", "--trust-remote-code",
    ):  # fmt: skip
        assert flag in result.stdout


def test_unknown_flag_exits_2_like_argparse(run_simulator):
    result = run_simulator(("--no-such-flag",))

    assert result.returncode == 2
    assert "unrecognized arguments: --no-such-flag" in result.stderr


def test_max_model_len_above_the_profile_exits_1_with_vllms_message(run_simulator):
    result = run_simulator(("--max-model-len", "50000"), profile={"max_position_embeddings": 40960})

    assert result.returncode == 1
    assert (
        "ValueError: User-specified max_model_len (50000) is greater than the derived max_model_len "
        "(max_position_embeddings=40960" in result.stderr
    )


def test_quantization_the_checkpoint_lacks_exits_1(run_simulator):
    result = run_simulator(("--quantization", "awq"), profile={"supported_quantizations": {"fp8": 0.8}})

    assert result.returncode == 1
    assert "ValueError: Quantization method specified in the model config (None)" in result.stderr
    assert "`quantization` argument (awq)" in result.stderr


def test_kv_cache_smaller_than_one_max_len_sequence_exits_1(run_simulator):
    tiny = {"max_position_embeddings": 4096, "kv_cache": {"kv_cache_bytes": 1 << 20, "bytes_per_token": 1024}}

    result = run_simulator(("--gpu-memory-utilization", "0.5"), profile=tiny)

    assert result.returncode == 1
    assert "ValueError: To serve at least one request with the models's max seq len (4096)" in result.stderr
    assert "estimated maximum model length is 512" in result.stderr


def test_malformed_speculative_config_exits_1(run_simulator):
    result = run_simulator(("--speculative-config", json.dumps({"method": "ngram"})))

    assert result.returncode == 1
    assert "num_speculative_tokens" in result.stderr


def test_crash_fault_from_the_environment_exits_70_at_start(run_simulator):
    result = run_simulator(env={"SIMULATOR_FAULTS": json.dumps({"crash": True})})

    assert result.returncode == 70


def test_bad_fault_json_in_the_environment_exits_1(run_simulator):
    result = run_simulator(env={"SIMULATOR_FAULTS": "{not json"})

    assert result.returncode == 1
    assert "SIMULATOR_FAULTS" in result.stderr


def test_agent_flags_are_accepted_and_served(start_simulator):
    spec = json.dumps({"method": "draft_model", "model": "draft", "num_speculative_tokens": 3})
    simulator = start_simulator(
        args=(
            "--model", "org/base", "--served-model-name", "chat", "alias", "--tokenizer", "org/base",
            "--max-num-seqs", "8", "--max-num-batched-tokens", "512", "--gpu-memory-utilization", "0.5",
            "--max-model-len", "2048", "--quantization", "fp8", "--no-enable-prefix-caching",
            "--speculative-config", spec, "--enforce-eager", "--enable-log-requests", "--seed", "7",
        )
    )  # fmt: skip

    models = simulator.get("/v1/models").json["data"]
    assert [m["id"] for m in models] == ["chat", "alias"]
    assert {m["root"] for m in models} == {"org/base"}
    assert {m["max_model_len"] for m in models} == {2048}
    assert simulator.chat("hi", model="alias", max_tokens=3).status == 200
    assert simulator.metric("vllm:cache_config_info", enable_prefix_caching="False", gpu_memory_utilization="0.5")
    assert simulator.metric("vllm:spec_decode_num_drafts_total", model_name="chat") > 0


def test_the_agents_flag_value_form_is_accepted_and_served(start_simulator):
    """Exactly what the agent passes (engine_node.config.engine_args): one `--flag=value` element per option."""
    from engine_node.config import NodeConfig, content_hash, engine_args
    from engine_node.settings import AgentSettings

    content = {
        "engine": {
            "model": "qwen3-0.6b", "served_model_name": "chat", "max_num_seqs": 8, "max_num_batched_tokens": 512,
            "gpu_memory_utilization": 0.5, "max_model_len": 2048, "quantization": "fp8",
            "enable_prefix_caching": False,
        },
        "speculative": {"enabled": True, "method": "ngram", "num_speculative_tokens": 3},
        "models": {
            "engine.model": {
                "name": "qwen3-0.6b", "source": "Qwen/Qwen3-0.6B", "revision": "c" * 40,
                "tokenizer": "Qwen/Qwen3-0.6B", "tokenizer_revision": "main", "trust_remote_code": True,
            }
        },
    }  # fmt: skip
    config = NodeConfig.from_message({"version": None, "hash": content_hash(content), "content": content})
    settings = AgentSettings(
        control_plane_url="", token="", node_name="n", backend="simulator", model="own", served_model_name=""
    )
    args = engine_args(config, settings)
    assert "--trust-remote-code" in args and all(a.startswith("--") for a in args)
    simulator = start_simulator(args=tuple(args))

    models = simulator.get("/v1/models").json["data"]
    assert [m["id"] for m in models] == ["chat"]
    assert {m["root"] for m in models} == {"Qwen/Qwen3-0.6B"}
    assert simulator.chat("hi", model="chat", max_tokens=3).status == 200
    assert simulator.metric("vllm:cache_config_info", enable_prefix_caching="False", gpu_memory_utilization="0.5")
