"""A pushed config: integrity check, and the engine flags it implies (any change to them means a restart)."""

import hashlib
import json
from dataclasses import dataclass

from engine_node import model_sources
from engine_node.engine_flags import FlagRefused, render
from engine_node.model_sources import MODEL_FIELD, ConfigModels, ModelEntry
from engine_node.settings import AgentSettings


class ConfigRejected(Exception):
    """The node cannot apply this config; the message goes back to the control plane in a NACK."""


@dataclass(frozen=True)
class NodeConfig:
    """`{version, hash, content}` as the control plane pushes it; content is the effective parameters."""

    version: dict | None
    hash: str
    content: dict

    @classmethod
    def from_message(cls, message: dict) -> "NodeConfig":
        content = message.get("content")
        if not isinstance(content, dict):
            raise ConfigRejected("content: must be a mapping of parameter sections")
        actual = content_hash(content)
        if actual != message.get("hash"):
            raise ConfigRejected(f"hash: content hashes to {actual}, not {message.get('hash')!r}")
        for section in ("engine", "speculative"):
            if not isinstance(content.get(section), dict):
                raise ConfigRejected(f"{section}: missing from the pushed parameters")
        return cls(version=message.get("version"), hash=actual, content=content)

    def as_message(self) -> dict:
        return {"version": self.version, "hash": self.hash, "content": self.content}

    @property
    def label(self) -> str:
        if self.version:
            return f"{self.version.get('template')} v{self.version.get('number')}"
        return self.hash[:12]


def content_hash(content: dict) -> str:
    """The control plane's hash: sha256 of canonical JSON (sorted keys, no spaces, UTF-8)."""
    canonical = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def engine_args(config: NodeConfig | None, settings: AgentSettings, *, speculative: bool = True) -> list[str]:
    """vLLM server flags for this config, each one `--flag=value` element from the fixed table (engine_flags.py);
    the simulator accepts the same ones. `speculative` False leaves speculative decoding out whatever the config
    says (a degraded pool whose template turns it off). Raises ConfigRejected naming the field of a refused value."""
    content = config.content if config else {}
    try:
        return _engine_args(content, settings, speculative=speculative)
    except FlagRefused as exc:
        raise ConfigRejected(str(exc)) from None


def config_models(config: NodeConfig | None, settings: AgentSettings) -> ConfigModels:
    """The resolved main and draft model of `config` (the node's own model without one); raises ConfigRejected."""
    try:
        return model_sources.config_models(config.content if config else {}, settings.model)
    except FlagRefused as exc:
        raise ConfigRejected(str(exc)) from None


def _engine_args(content: dict, settings: AgentSettings, *, speculative: bool) -> list[str]:
    engine, spec = content.get("engine") or {}, content.get("speculative") or {}
    models = model_sources.config_models(content, settings.model)
    main = models.main
    candidates = [
        ("model", main.source, MODEL_FIELD),
        ("revision", main.revision, MODEL_FIELD),
        ("tokenizer", main.tokenizer, MODEL_FIELD),
        ("tokenizer_revision", main.tokenizer_revision, MODEL_FIELD),
        ("trust_remote_code", main.trust_remote_code, MODEL_FIELD),
        (
            "served_model_name",
            engine.get("served_model_name") or settings.served_model_name,
            "engine.served_model_name",
        ),
    ]
    candidates += [(key, engine.get(key), f"engine.{key}") for key in ENGINE_OPTIONS]
    if spec.get("enabled") and speculative:
        candidates.append(("speculative_config", _speculative_config(spec, models.draft), "speculative"))
    args = []
    for name, value, field in candidates:
        if value is None or value == "":
            continue
        flag = render(name, value, field=field)
        if flag is not None:
            args.append(flag)
    return args + list(settings.engine_args)


# Template fields under `engine` that map one to one onto vLLM options of the same name.
ENGINE_OPTIONS = (
    "max_num_seqs",
    "max_num_batched_tokens",
    "gpu_memory_utilization",
    "max_model_len",
    "quantization",
    "enable_prefix_caching",
)


def _speculative_config(spec: dict, draft: ModelEntry | None) -> dict:
    """vLLM's --speculative-config from the template's typed fields only (engine_flags.py renders it)."""
    tokens = _spec_int(spec, "num_speculative_tokens", 3, 3, 5)
    config = {"method": spec.get("method"), "num_speculative_tokens": tokens}
    if draft is not None:
        config["model"] = draft.source
        if draft.revision:
            config["revision"] = draft.revision
    elif spec.get("method") == "ngram":
        low = _spec_int(spec, "prompt_lookup_min", 1, 1, 16)
        high = _spec_int(spec, "prompt_lookup_max", 4, 1, 16)
        if low > high:
            raise FlagRefused(
                "speculative.prompt_lookup_min", f"must be at most speculative.prompt_lookup_max ({high})"
            )
        config["prompt_lookup_min"], config["prompt_lookup_max"] = low, high
    limit = spec.get("disable_above_batch_size")
    if limit is not None:
        limit = _spec_int(spec, "disable_above_batch_size", None, 1, 4096)
        # vLLM's batch-size schedule (inclusive ranges, the last one carried forward): k candidates up to `limit`
        # running requests, none above it.
        config["num_speculative_tokens_per_batch_size"] = [[1, limit, tokens], [limit + 1, limit + 1, 0]]
    return config


def _spec_int(spec: dict, key: str, default: int | None, low: int, high: int) -> int:
    value = spec.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise FlagRefused(f"speculative.{key}", f"must be an integer, got {type(value).__name__}")
    if not low <= value <= high:
        raise FlagRefused(f"speculative.{key}", f"must be between {low} and {high}, got {value}")
    return value
