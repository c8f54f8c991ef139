"""A pushed config: integrity check, and the engine flags it implies (any change to them means a restart)."""

import hashlib
import json
from dataclasses import dataclass

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
    """vLLM server flags for this config; the simulator accepts the same ones. `speculative` False leaves
    speculative decoding out whatever the config says (a degraded pool whose template turns it off)."""
    engine = config.content["engine"] if config else {}
    spec = config.content["speculative"] if config else {}
    args = ["--model", engine.get("model") or settings.model]
    served = engine.get("served_model_name") or settings.served_model_name
    if served:
        args += ["--served-model-name", served]
    if engine.get("tokenizer"):
        args += ["--tokenizer", engine["tokenizer"]]
    for key, flag in (
        ("max_num_seqs", "--max-num-seqs"),
        ("max_num_batched_tokens", "--max-num-batched-tokens"),
        ("gpu_memory_utilization", "--gpu-memory-utilization"),
        ("max_model_len", "--max-model-len"),
        ("quantization", "--quantization"),
    ):
        if engine.get(key) is not None:
            args += [flag, str(engine[key])]
    if "enable_prefix_caching" in engine:
        args.append("--enable-prefix-caching" if engine["enable_prefix_caching"] else "--no-enable-prefix-caching")
    if spec.get("enabled") and speculative:
        args += ["--speculative-config", json.dumps(_speculative_config(spec), sort_keys=True)]
    return args + list(settings.engine_args)


def _speculative_config(spec: dict) -> dict:
    config = {"method": spec["method"], "num_speculative_tokens": spec["num_speculative_tokens"]}
    if spec["method"] == "draft_model":
        config["model"] = spec["draft_model"]
    elif spec["method"] == "ngram":
        config["prompt_lookup_max"] = 4
    return config
