"""Checkpoint directories for the node's checkpoint checks: a config.json (and tokenizer files) as vLLM reads them.

`checkpoint(dir, config, tokenizer_from=...)` writes one; `variants(root, tiny, tiny_draft)` derives the set the
vLLM tests use from the tiny generated pair (scripts/make_tiny_model.py): quantized copies, a draft with a padded
vocabulary, an EAGLE head without tokenizer files, a model with MTP layers, RoPE-scaled copies. No weights: vLLM's
config classes read config.json and the tokenizer's files only.
"""

import json
import shutil
from pathlib import Path

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
QUANTIZATION_CONFIGS = {
    "awq": {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"},
    "gptq": {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False, "sym": True},
    "fp8": {"quant_method": "fp8", "activation_scheme": "dynamic"},
}
# A DeepSeek-V3-shaped model small enough for vLLM's config classes, with one multi-token-prediction layer.
MTP_CONFIG = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "hidden_size": 128,
    "intermediate_size": 256,
    "moe_intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_nextn_predict_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "n_shared_experts": 1,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "first_k_dense_replace": 1,
    "moe_layer_freq": 1,
    "n_group": 1,
    "topk_group": 1,
    "kv_lora_rank": 64,
    "q_lora_rank": 64,
    "qk_rope_head_dim": 32,
    "v_head_dim": 64,
    "qk_nope_head_dim": 32,
    "max_position_embeddings": 2048,
    "rope_theta": 10000.0,
    "torch_dtype": "bfloat16",
    "bos_token_id": 1,
    "eos_token_id": 2,
    "routed_scaling_factor": 1.0,
    "scoring_func": "sigmoid",
    "topk_method": "noaux_tc",
    "norm_topk_prob": True,
    "tie_word_embeddings": False,
}


def checkpoint(directory: Path, config: dict, *, tokenizer_from: Path | None = None) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config, indent=1))
    for name in TOKENIZER_FILES if tokenizer_from is not None else ():
        if (tokenizer_from / name).is_file():
            shutil.copy(tokenizer_from / name, directory / name)
    return directory


def read_config(directory: Path) -> dict:
    return json.loads((directory / "config.json").read_text())


def variants(root: Path, tiny: Path, tiny_draft: Path) -> dict[str, Path]:
    """Name -> directory, every one derived from the tiny pair."""
    base, draft = read_config(tiny), read_config(tiny_draft)
    dirs = {"tiny": tiny, "tiny-draft": tiny_draft}
    for method, section in QUANTIZATION_CONFIGS.items():
        dirs[f"tiny-{method}"] = checkpoint(
            root / f"tiny-{method}", {**base, "quantization_config": section}, tokenizer_from=tiny
        )
    # The same tokenizer files, a vocabulary padded to a multiple of 64 (as a 0.5B/7B pair often differs).
    padded = -(-base["vocab_size"] // 64) * 64 + 64
    dirs["draft-padded-vocab"] = checkpoint(
        root / "draft-padded-vocab", {**draft, "vocab_size": padded}, tokenizer_from=tiny_draft
    )
    dirs["eagle-head"] = checkpoint(root / "eagle-head", draft)  # no tokenizer files: it runs on the main model's
    dirs["mtp-model"] = checkpoint(
        root / "mtp-model", {**MTP_CONFIG, "vocab_size": base["vocab_size"]}, tokenizer_from=tiny
    )
    rope = base.get("rope_parameters") or {"rope_theta": 10000.0}
    dirs["tiny-rope-linear"] = checkpoint(
        root / "tiny-rope-linear",
        {**base, "rope_parameters": {**rope, "rope_type": "linear", "factor": 2.0}},
        tokenizer_from=tiny,
    )
    dirs["tiny-rope-yarn"] = checkpoint(
        root / "tiny-rope-yarn",
        {
            **base,
            "rope_parameters": {**rope, "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 512},
        },
        tokenizer_from=tiny,
    )
    short = checkpoint(root / "tiny-short-tokenizer", base, tokenizer_from=tiny)
    tokenizer_config = json.loads((short / "tokenizer_config.json").read_text())
    (short / "tokenizer_config.json").write_text(json.dumps({**tokenizer_config, "model_max_length": 1024}))
    dirs["tiny-short-tokenizer"] = short
    return dirs
