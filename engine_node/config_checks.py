"""What the node checks of a pushed config before it starts an engine on it, whatever the control plane checked.

In order: every flag value against the fixed table (engine_flags.py, through config.engine_args), the engine fields
vLLM's own config classes relate (SchedulerConfig: max_num_batched_tokens >= max_num_seqs), every model against the
operator's allow-list (model_sources.py), a draft's tokenizer files against the main model's (tokenizer_files.py),
and what the config asks of the checkpoints themselves (checkpoints.py): the quantization method, the MTP layers
of method mtp, a draft's vocabulary size, the model's maximum length. Every refusal is a ConfigRejected naming the
template field; the node keeps serving what it ran.
"""

from engine_node import checkpoints
from engine_node.checkpoints import CheckpointRefused
from engine_node.config import ConfigRejected, NodeConfig, config_models, engine_args
from engine_node.engine_flags import FlagRefused
from engine_node.model_sources import DRAFT_FIELD, DRAFT_METHODS, ConfigModels, ModelAllowList
from engine_node.settings import AgentSettings
from engine_node.tokenizer_files import TokenizerMismatch, check_draft_tokenizer

METHOD_FIELD = "speculative.method"


def check_config(config: NodeConfig, settings: AgentSettings, allow_list: ModelAllowList) -> list[str]:
    """Raise ConfigRejected naming the field of the first thing the node will not run; return what was checked.

    Reads the file system (paths, tokenizer files, config.json): call it off the gateway's event loop."""
    engine_args(config, settings)
    models = config_models(config, settings)
    try:
        check_engine_fields(config.content.get("engine") or {})
        allow_list.check(models)
        spec = config.content.get("speculative") or {}
        method = spec.get("method") if spec.get("enabled") else None
        notes = [check_draft_tokenizer(models, backend=settings.backend, method=method or "draft_model")]
        notes += check_checkpoints(config.content, models, backend=settings.backend)
    except (FlagRefused, TokenizerMismatch, CheckpointRefused) as exc:
        raise ConfigRejected(str(exc)) from None
    return notes


def check_engine_fields(engine: dict) -> None:
    """The engine fields vLLM's config classes relate to each other; raises FlagRefused naming the field."""
    batched, seqs = engine.get("max_num_batched_tokens"), engine.get("max_num_seqs")
    if isinstance(batched, int) and isinstance(seqs, int) and batched < seqs:
        raise FlagRefused(
            "engine.max_num_batched_tokens",
            f"must be at least engine.max_num_seqs ({seqs}): vLLM schedules a token of every running sequence in "
            "one step",
        )


def check_checkpoints(content: dict, models: ConfigModels, *, backend: str) -> list[str]:
    """What the config asks of its checkpoints' config.json (checkpoints.py); raises CheckpointRefused."""
    engine, spec = content.get("engine") or {}, content.get("speculative") or {}
    main = models.main
    if backend == "simulator":
        # The simulator loads no checkpoint (its limits are its profile's): only the choice itself is checked.
        quantization = engine.get("quantization")
        if quantization is not None and quantization not in checkpoints.QUANTIZATIONS:
            choices = ", ".join(checkpoints.QUANTIZATIONS)
            raise CheckpointRefused(
                checkpoints.QUANTIZATION_FIELD, f"{quantization!r} is not one of vLLM's methods ({choices})"
            )
        return [f"checkpoints not checked: the simulated engine loads none of {main.label}"]
    config = checkpoints.read_config(main.source, main.revision)
    notes = [checkpoints.check_quantization(engine.get("quantization"), config, main.label)]
    if config is None:
        notes.append(f"max_model_len not compared: no config.json of {main.label} on this node")
    else:
        notes.append(checkpoints.check_max_model_len(engine.get("max_model_len"), config, main.label))
    if spec.get("enabled"):
        notes.append(_check_speculation(spec.get("method"), config, models))
    return notes


def _check_speculation(method, config: dict | None, models: ConfigModels) -> str:
    main = models.main
    if method == "mtp":
        if config is None:
            raise CheckpointRefused(
                METHOD_FIELD, f"mtp runs the main model's own MTP layers: no config.json of {main.label} on this node"
            )
        layers = checkpoints.mtp_layers(config)
        if not layers:
            keys = " or ".join(checkpoints.MTP_LAYER_KEYS)
            raise CheckpointRefused(
                METHOD_FIELD,
                f"mtp runs the main model's own multi-token-prediction layers, and {main.label} has none ({keys} "
                "in its config.json); use draft_model, eagle or ngram",
            )
        return f"mtp on the main model's {layers} MTP layer(s)"
    if method not in DRAFT_METHODS or models.draft is None:
        return f"speculation {method}: nothing to check in the checkpoints"
    draft = models.draft
    draft_config = checkpoints.read_config(draft.source, draft.revision)
    if config is None or draft_config is None:
        missing = main if config is None else draft
        raise CheckpointRefused(
            DRAFT_FIELD, f"cannot compare vocabulary sizes: no config.json of {missing.label} on this node"
        )
    main_vocab, draft_vocab = checkpoints.vocab_size(config), checkpoints.vocab_size(draft_config)
    if main_vocab != draft_vocab:
        why = (
            "vLLM refuses a draft model whose vocabulary size differs, even with the same tokenizer files"
            if method == "draft_model"
            else f"an {method} head proposes tokens of the main model's vocabulary"
        )
        raise CheckpointRefused(
            DRAFT_FIELD,
            f"{draft.name!r} has vocab_size {draft_vocab} and the main model {main.label} {main_vocab} (their "
            f"config.json): {why}",
        )
    return f"{method} {draft.label}: vocab_size {draft_vocab}, the main model's"
