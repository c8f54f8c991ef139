"""What a config asks of the checkpoints it names, read from their own config.json before the engine starts.

vLLM 0.32 refuses at start-up what these functions find first, so the node NACKs naming the template field instead
of restarting into a failure:

- **quantization**: `engine.quantization` must be one of vLLM's methods (QUANTIZATIONS) and fit the checkpoint's
  own `quantization_config`: an AWQ checkpoint runs `awq` / `awq_marlin`, a GPTQ one `gptq` / `gptq_marlin`, an FP8
  one `fp8`; an unquantized checkpoint runs `fp8` (quantized while loading) but not the weight-only methods, which
  need the checkpoint's quantized weights. Leaving it empty runs whatever the checkpoint is.
- **mtp** speculation runs the main model's own multi-token-prediction layers: its config.json must declare some
  (`num_nextn_predict_layers` or `mtp_num_hidden_layers`, at the top or in `text_config`, the fields vLLM reads).
- a **draft**'s `vocab_size` must be the main model's (vLLM's verify_equal_vocab_size_if_draft_model; an EAGLE
  head's too, which vLLM loads with the main model's vocabulary).
- **engine.max_model_len** at most the model's own maximum, derived as vLLM derives it.

A repo id is read from the Hugging Face cache at its pinned revision (`local_directory`). Where a check needs a
config.json the node does not have, a vLLM node refuses (download the model first). The simulator loads no
checkpoint, so a simulator node checks only that the quantization is one of vLLM's methods.
"""

import json
import os
import re
from pathlib import Path

QUANTIZATION_FIELD = "engine.quantization"
MAX_MODEL_LEN_FIELD = "engine.max_model_len"
# engine.quantization's choices, copied from controlplane/params/schema.py (engine_node never imports the control
# plane; tests/engine_node/test_vllm_gpu_paths.py holds both equal, and within vLLM's QUANTIZATION_METHODS).
QUANTIZATIONS = ("awq", "awq_marlin", "gptq", "gptq_marlin", "fp8")
# The checkpoint quantization (quantization_config.quant_method) each choice runs on; None: an unquantized one.
RUNS_ON: dict[str, tuple[str | None, ...]] = {
    "awq": ("awq",),
    "awq_marlin": ("awq",),
    "gptq": ("gptq",),
    "gptq_marlin": ("gptq",),
    "fp8": ("fp8", None),
}
MTP_LAYER_KEYS = ("num_nextn_predict_layers", "mtp_num_hidden_layers")
# vLLM's keys for a model's own maximum length (ModelArchConfigConvertor.derive_max_model_len_and_key): the smallest
# one present, unless model_max_length says otherwise.
MAX_LEN_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "max_target_positions",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)
# RoPE types whose max_position_embeddings is already scaled (vLLM applies no factor for them).
_SCALED_ROPE = ("su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling")
_COMMIT = re.compile(r"[0-9a-f]{40}")


class CheckpointRefused(ValueError):
    """The checkpoint cannot run what the config asks; `field` names the template field."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field


def local_directory(source: str, revision: str = "") -> Path | None:
    """The local directory of a model: the path itself, or the Hugging Face cache's snapshot of a repo id at
    `revision` (its `main` when unpinned); None when the node has no copy."""
    if os.path.isabs(source):
        return Path(source) if os.path.isdir(source) else None
    repo = _hub_cache() / f"models--{source.replace('/', '--')}"
    commit = revision if _COMMIT.fullmatch(revision or "") else _read_ref(repo, revision or "main")
    snapshot = repo / "snapshots" / commit if commit else None
    return snapshot if snapshot is not None and snapshot.is_dir() else None


def read_config(source: str, revision: str = "") -> dict | None:
    """The model's config.json, or None when the node has none (or it is not a JSON object)."""
    directory = local_directory(source, revision)
    if directory is None:
        return None
    try:
        document = json.loads((directory / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return document if isinstance(document, dict) else None


def _text_config(config: dict) -> dict:
    """Where the language model's fields are: `text_config` of a multimodal checkpoint, else the top level."""
    text = config.get("text_config")
    return text if isinstance(text, dict) else config


def quantization_method(config: dict) -> str | None:
    """The checkpoint's own quantization (`quantization_config.quant_method`, lower case), None when unquantized."""
    for holder in (config, _text_config(config)):
        section = holder.get("quantization_config") or holder.get("compression_config")
        if isinstance(section, dict):
            method = section.get("quant_method")
            return str(method).lower() if method else None
    return None


def vocab_size(config: dict) -> int | None:
    value = _text_config(config).get("vocab_size", config.get("vocab_size"))
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def mtp_layers(config: dict) -> int:
    """How many multi-token-prediction layers the checkpoint declares (0: none)."""
    for holder in (config, _text_config(config)):
        for key in MTP_LAYER_KEYS:
            value = holder.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    return 0


def max_model_len(config: dict) -> int | None:
    """The model's own maximum length as vLLM derives it for a generating model, or None when config.json names
    none (vLLM reads tokenizer_config.json's model_max_length only for pooling models)."""
    text = _text_config(config)
    found = [text[key] for key in MAX_LEN_KEYS if isinstance(text.get(key), int | float)]
    if not found:
        return None
    derived = float(text["model_max_length"]) if text.get("model_max_length") else float(min(found))
    if "gemma3" not in str(text.get("model_type", config.get("model_type", ""))):
        factor = 1.0
        for rope in _rope_parameters(text):
            if rope.get("rope_type", rope.get("type", "default")) not in _SCALED_ROPE:
                factor = rope.get("factor", factor)
        derived *= factor if isinstance(factor, int | float) else 1.0
    return int(derived)


def _rope_parameters(config: dict) -> list[dict]:
    rope = config.get("rope_parameters") or config.get("rope_scaling")
    if not isinstance(rope, dict):
        return []
    nested = [value for value in rope.values() if isinstance(value, dict)]
    return nested or [rope]


def check_quantization(requested, config: dict | None, label: str) -> str:
    """Raise CheckpointRefused when vLLM would refuse `requested` on this checkpoint; return what was checked."""
    if requested is None:
        return "quantization: the checkpoint's own"
    if requested not in QUANTIZATIONS:
        choices = ", ".join(QUANTIZATIONS)
        raise CheckpointRefused(QUANTIZATION_FIELD, f"{requested!r} is not one of vLLM's methods ({choices})")
    if config is None:
        raise CheckpointRefused(
            QUANTIZATION_FIELD, f"cannot check {requested!r} against {label}: no config.json of it on this node"
        )
    own = quantization_method(config)
    if own not in RUNS_ON[requested]:
        what = f"quantized with {own!r}" if own else "not quantized"
        runs = " or ".join(
            "an unquantized one" if q is None else f"a checkpoint quantized with {q!r}" for q in RUNS_ON[requested]
        )
        raise CheckpointRefused(QUANTIZATION_FIELD, f"{requested!r} needs {runs}, and {label} is {what}")
    return f"quantization {requested} on a {own or 'unquantized'} checkpoint"


def check_max_model_len(requested, config: dict | None, label: str) -> str:
    own = max_model_len(config) if config is not None else None
    if own is None or not isinstance(requested, int):
        return "max_model_len: not compared (no maximum in the model's config.json)"
    if requested > own and requested > (config.get("model_max_length") or 0):
        raise CheckpointRefused(
            MAX_MODEL_LEN_FIELD, f"{requested} is above {label}'s own maximum of {own} tokens (its config.json)"
        )
    return f"max_model_len {requested} within the model's {own}"


def _hub_cache() -> Path:
    """Where huggingface_hub keeps downloads: HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME", "~/.cache"), "huggingface")
    return Path(home).expanduser() / "hub"


def _read_ref(repo: Path, ref: str) -> str:
    if ".." in ref.split("/"):
        return ""
    try:
        return (repo / "refs" / ref).read_text(encoding="utf-8").strip()
    except (OSError, ValueError):
        return ""
