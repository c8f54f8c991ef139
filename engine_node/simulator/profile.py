"""A simulator profile: the simulated checkpoint and the parameters of its latency model, read from YAML."""

import json
import math
import os
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import yaml

DEFAULT_PROFILE_PATH = Path(__file__).resolve().parent / "profiles" / "default.yaml"
# The field report's tuned deployment, which `make run`'s demo fleet simulates (see the simulator's README).
DEMO_PROFILE_PATH = DEFAULT_PROFILE_PATH.with_name("demo.yaml")


class ProfileError(ValueError):
    """The profile or the fault settings are malformed; the simulator refuses to start."""


@dataclass(frozen=True)
class Faults:
    """Injected misbehaviour: slower steps, failed requests, a failing /health, a crash, a wedged engine, GPU memory
    leaking at `memory_leak_mb_per_s` (engine_node/simulator/gpu.py), and a draft acceptance rate other than the
    profile's (spec_acceptance_rate: the traffic's drafts stopped matching)."""

    latency_factor: float = 1.0
    error_rate: float = 0.0
    memory_leak_mb_per_s: float = 0.0
    unhealthy: bool = False
    crash: bool = False
    hang: bool = False
    spec_acceptance_rate: float | None = None

    def updated(self, changes: Any) -> "Faults":
        """These faults with `changes` (a mapping of some of the fields) applied; raises ProfileError."""
        if not isinstance(changes, dict):
            raise ProfileError("faults: must be a JSON object")
        unknown = sorted(set(changes) - {f.name for f in fields(self)})
        if unknown:
            raise ProfileError(f"faults: unknown keys {unknown}")
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        for key in ("unhealthy", "crash", "hang"):
            if key in changes:
                if not isinstance(changes[key], bool):
                    raise ProfileError(f"faults.{key}: must be true or false")
                values[key] = changes[key]
        if "latency_factor" in changes:
            values["latency_factor"] = _number(changes["latency_factor"], "faults.latency_factor", low=0.0)
            if values["latency_factor"] <= 0:
                raise ProfileError("faults.latency_factor: must be greater than 0")
        if "error_rate" in changes:
            values["error_rate"] = _number(changes["error_rate"], "faults.error_rate", low=0.0, high=1.0)
        if "memory_leak_mb_per_s" in changes:
            values["memory_leak_mb_per_s"] = _number(
                changes["memory_leak_mb_per_s"], "faults.memory_leak_mb_per_s", low=0.0, high=1e6
            )
        if "spec_acceptance_rate" in changes:
            rate = changes["spec_acceptance_rate"]
            values["spec_acceptance_rate"] = (
                None if rate is None else _number(rate, "faults.spec_acceptance_rate", low=0.0, high=1.0)
            )
        return Faults(**values)

    def as_dict(self) -> dict:
        """The faults as the JSON object GET /sim/faults returns."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class Profile:
    """Everything the simulator knows about the model and GPU it pretends to run."""

    model: str
    max_position_embeddings: int
    supported_quantizations: dict[str, float]
    block_size: int
    kv_cache_bytes: int
    bytes_per_token: int
    time_scale: float
    prefill_base_ms: float
    prefill_per_token_ms: float
    decode_base_ms: float
    decode_per_seq_ms: float
    decode_per_kv_token_ms: float
    reply_median: float
    reply_sigma: float
    reply_min: int
    reply_max: int
    acceptance_rate: float
    verify_overhead: float
    fragmentation_floor: float
    faults: Faults

    @property
    def bytes_per_block(self) -> int:
        """KV bytes of one block of block_size tokens."""
        return self.block_size * self.bytes_per_token


def load_profile(path: str | Path | None = None, env: dict[str, str] | None = None) -> Profile:
    """The packaged default profile with `path`'s keys laid over it and SIMULATOR_FAULTS over its faults."""
    document = _read(DEFAULT_PROFILE_PATH)
    if path:
        document = _merge(document, _read(Path(path)))
    env = os.environ if env is None else env
    profile = _build(document)
    if env.get("SIMULATOR_FAULTS"):
        try:
            overrides = json.loads(env["SIMULATOR_FAULTS"])
        except json.JSONDecodeError as exc:
            raise ProfileError(f"SIMULATOR_FAULTS: not valid JSON ({exc})") from exc
        profile = replace(profile, faults=profile.faults.updated(overrides))
    return profile


def _read(path: Path) -> dict:
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ProfileError(f"profile {path}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise ProfileError(f"profile {path}: not valid YAML ({exc})") from exc
    if not isinstance(document, dict):
        raise ProfileError(f"profile {path}: must be a mapping")
    return document


def _merge(base: dict, override: dict) -> dict:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict) and key != "supported_quantizations":
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _section(document: dict, name: str) -> dict:
    section = document.get(name) or {}
    if not isinstance(section, dict):
        raise ProfileError(f"{name}: must be a mapping")
    return section


def _number(value: Any, name: str, low: float | None = None, high: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ProfileError(f"{name}: must be a number")
    if not math.isfinite(value):
        raise ProfileError(f"{name}: must be a finite number")
    if (low is not None and value < low) or (high is not None and value > high):
        raise ProfileError(f"{name}: must be within [{low}, {high}]")
    return float(value)


def _integer(value: Any, name: str, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ProfileError(f"{name}: must be an integer of at least {low}")
    return value


def _build(document: dict) -> Profile:
    kv = _section(document, "kv_cache")
    latency = _section(document, "latency")
    reply = _section(document, "reply_length")
    spec = _section(document, "speculative")
    quantizations = document.get("supported_quantizations") or {}
    if not isinstance(quantizations, dict):
        raise ProfileError("supported_quantizations: must map each method to its step-cost factor")
    if not isinstance(document.get("model"), str) or not document["model"]:
        raise ProfileError("model: must be a non-empty string")
    time_scale = _number(latency.get("time_scale"), "latency.time_scale", low=0.0)
    if time_scale <= 0:
        raise ProfileError("latency.time_scale: must be greater than 0")
    reply_min = _integer(reply.get("min"), "reply_length.min")
    reply_max = _integer(reply.get("max"), "reply_length.max", low=reply_min)
    return Profile(
        model=document["model"],
        max_position_embeddings=_integer(document.get("max_position_embeddings"), "max_position_embeddings"),
        supported_quantizations={
            str(name): _number(factor, f"supported_quantizations.{name}", low=0.0)
            for name, factor in quantizations.items()
        },
        block_size=_integer(kv.get("block_size"), "kv_cache.block_size"),
        kv_cache_bytes=_integer(kv.get("kv_cache_bytes"), "kv_cache.kv_cache_bytes"),
        bytes_per_token=_integer(kv.get("bytes_per_token"), "kv_cache.bytes_per_token"),
        time_scale=time_scale,
        prefill_base_ms=_number(latency.get("prefill_base_ms"), "latency.prefill_base_ms", low=0.0),
        prefill_per_token_ms=_number(latency.get("prefill_per_token_ms"), "latency.prefill_per_token_ms", low=0.0),
        decode_base_ms=_number(latency.get("decode_base_ms"), "latency.decode_base_ms", low=0.0),
        decode_per_seq_ms=_number(latency.get("decode_per_seq_ms"), "latency.decode_per_seq_ms", low=0.0),
        decode_per_kv_token_ms=_number(
            latency.get("decode_per_kv_token_ms", 0.0), "latency.decode_per_kv_token_ms", low=0.0
        ),
        reply_median=_number(reply.get("median"), "reply_length.median", low=1.0),
        reply_sigma=_number(reply.get("sigma"), "reply_length.sigma", low=0.0),
        reply_min=reply_min,
        reply_max=reply_max,
        acceptance_rate=_number(spec.get("acceptance_rate"), "speculative.acceptance_rate", low=0.0, high=1.0),
        verify_overhead=_number(spec.get("verify_overhead"), "speculative.verify_overhead", low=0.0),
        fragmentation_floor=_number(
            _section(document, "fragmentation").get("floor"), "fragmentation.floor", low=0.0, high=1.0
        ),
        faults=Faults().updated(_section(document, "faults")),
    )
