"""The node's checks of what a config asks of its checkpoints, on config.json files written here (no vLLM needed;
tests/engine_node/test_vllm_gpu_paths.py holds the same rules against vLLM's own config classes).

Every refusal is a ConfigRejected that starts with the template field, and the control plane refuses what it can
see without the files (a method without its draft, a value that is not vLLM's)."""

import pytest

from controlplane.params import schema
from controlplane.params.validation import validate
from engine_node.config import ConfigRejected, NodeConfig, content_hash, engine_args
from engine_node.config_checks import check_config
from engine_node.model_sources import ModelAllowList
from engine_node.settings import AgentSettings
from tests.engine_node.checkpoint_dirs import MTP_CONFIG, QUANTIZATION_CONFIGS, checkpoint

LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 151936,
         "max_position_embeddings": 4096, "rope_parameters": {"rope_type": "default", "rope_theta": 1e6}}  # fmt: skip


@pytest.fixture
def node(tmp_path):
    """Checkpoints under tmp_path, an allow-list of that directory, and `verdict(engine, speculative, main, draft)`."""
    tokenizer = tmp_path / "tokenizer-source"
    tokenizer.mkdir()
    (tokenizer / "tokenizer.json").write_text('{"model": {"type": "BPE", "vocab": {"a": 0}}}')
    mtp = {**MTP_CONFIG, "vocab_size": 151936, "max_position_embeddings": 4096}
    dirs = {
        "main": checkpoint(tmp_path / "main", LLAMA, tokenizer_from=tokenizer),
        "draft": checkpoint(tmp_path / "draft", {**LLAMA, "num_hidden_layers": 1}, tokenizer_from=tokenizer),
        "draft-152064": checkpoint(
            tmp_path / "draft-152064", {**LLAMA, "vocab_size": 152064}, tokenizer_from=tokenizer
        ),
        "eagle-head": checkpoint(tmp_path / "eagle-head", {**LLAMA, "num_hidden_layers": 1}),
        "mtp": checkpoint(tmp_path / "mtp", mtp, tokenizer_from=tokenizer),
        **{
            f"main-{method}": checkpoint(
                tmp_path / f"main-{method}", {**LLAMA, "quantization_config": section}, tokenizer_from=tokenizer
            )
            for method, section in QUANTIZATION_CONFIGS.items()
        },
    }
    settings = AgentSettings(control_plane_url="", token="", node_name="n", backend="vllm", model=str(dirs["main"]),
                             served_model_name="")  # fmt: skip
    allow = ModelAllowList(model_dirs=[tmp_path], allowed=[], own_model="", allow_trust_remote_code=False)

    def verdict(engine=None, speculative=None, main="main", draft=None) -> tuple[list[str], str | None, list]:
        """(control-plane errors, node refusal or None, rendered argv)"""
        spec = {"enabled": bool(speculative), **(speculative or {}), **({"draft_model": draft} if draft else {})}
        authored = {
            "engine": {"model": main, "max_model_len": 4096, **(engine or {})},
            "batch": {"long_context_threshold": 1024},
            "speculative": spec,
        }
        _, errors = validate({schema.ROOT: authored})
        content = schema.effective(authored)
        entry = {"tokenizer": "", "revision": "", "tokenizer_revision": "", "trust_remote_code": False,
                 "is_draft_capable": True}  # fmt: skip
        content["models"] = {
            "engine.model": {**entry, "name": main, "source": str(dirs[main])},
            "speculative.draft_model": {**entry, "name": draft, "source": str(dirs[draft])} if draft else None,
        }
        config = NodeConfig.from_message({"version": None, "hash": content_hash(content), "content": content})
        try:
            check_config(config, settings, allow)
        except ConfigRejected as exc:
            return [str(e) for e in errors], str(exc), []
        return [str(e) for e in errors], None, engine_args(config, settings)

    return verdict


def spec_flag(argv: list[str]) -> str:
    return next(a for a in argv if a.startswith("--speculative-config="))


def test_eagle_methods_need_a_head_and_take_one_without_tokenizer_files(node):
    for method in ("eagle", "eagle3"):
        errors, refusal, _ = node(speculative={"method": method})
        assert errors[0].startswith(f"speculative.draft_model: required when method is {method} (an EAGLE")
        assert refusal.startswith(f"speculative.draft_model: required when speculative.method is {method}")
        errors, refusal, argv = node(speculative={"method": method}, draft="eagle-head")
        assert errors == [] and refusal is None
        assert f'"method":"{method}","model":"' in spec_flag(argv) and "eagle-head" in spec_flag(argv)


def test_mtp_needs_the_main_models_own_layers(node):
    errors, refusal, _ = node(speculative={"method": "mtp"})
    assert errors == []
    assert refusal.startswith("speculative.method: mtp runs the main model's own multi-token-prediction layers")
    assert "num_nextn_predict_layers or mtp_num_hidden_layers" in refusal
    _, refusal, argv = node(speculative={"method": "mtp"}, main="mtp")
    assert refusal is None and spec_flag(argv) == '--speculative-config={"method":"mtp","num_speculative_tokens":3}'


@pytest.mark.parametrize(
    ("quantization", "main", "refusal"),
    [
        ("awq", "main-awq", None),
        ("awq_marlin", "main-awq", None),
        ("gptq", "main-gptq", None),
        ("gptq_marlin", "main-gptq", None),
        ("fp8", "main-fp8", None),
        ("fp8", "main", None),
        (None, "main-gptq", None),
        ("awq", "main-gptq", "'awq' needs a checkpoint quantized with 'awq', and 'main-gptq' is quantized with 'gptq'"),
        ("gptq", "main", "'gptq' needs a checkpoint quantized with 'gptq', and 'main' is not quantized"),
        ("fp8", "main-awq", "'fp8' needs a checkpoint quantized with 'fp8' or an unquantized one, and 'main-awq'"),
    ],
)
def test_quantization_fits_the_checkpoint(node, quantization, main, refusal):
    errors, refused, argv = node(engine={"quantization": quantization}, main=main)
    assert errors == []
    if refusal is None:
        assert refused is None
        assert (f"--quantization={quantization}" in argv) is (quantization is not None)
    else:
        assert refused.startswith(f"engine.quantization: {refusal}")


def test_bitsandbytes_is_not_offered_and_not_run(node):
    errors, refusal, _ = node(engine={"quantization": "bitsandbytes"})
    assert errors == ["engine.quantization: must be one of awq, awq_marlin, gptq, gptq_marlin, fp8; got 'bitsandbytes'"]
    assert refusal.startswith("engine.quantization: 'bitsandbytes' is not one of vLLM's methods")


def test_a_draft_with_the_same_tokenizer_files_and_another_vocab_size_is_refused(node):
    assert node(speculative={"method": "draft_model"}, draft="draft")[1] is None
    _, refusal, _ = node(speculative={"method": "draft_model"}, draft="draft-152064")
    assert refusal == (
        "speculative.draft_model: 'draft-152064' has vocab_size 152064 and the main model 'main' 151936 (their "
        "config.json): vLLM refuses a draft model whose vocabulary size differs, even with the same tokenizer files"
    )


def test_engine_limits_vllm_relates(node):
    errors, refusal, _ = node(engine={"max_num_batched_tokens": 32, "max_num_seqs": 64})
    assert errors[0].startswith("engine.max_num_batched_tokens: must be at least engine.max_num_seqs (64)")
    assert refusal.startswith("engine.max_num_batched_tokens: must be at least engine.max_num_seqs (64)")
    _, refusal, _ = node(engine={"max_model_len": 8192})
    assert refusal == "engine.max_model_len: 8192 is above 'main''s own maximum of 4096 tokens (its config.json)"
    assert validate({schema.ROOT: {"engine": {"gpu_memory_utilization": 0.96}}})[1]
    assert not validate({schema.ROOT: {"engine": {"gpu_memory_utilization": 0.95}}})[1]
