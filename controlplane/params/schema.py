"""The one schema of a parameter template: every field, its default, its range and hot/cold tag.

The value sets and the Field type are controlplane/params/vocabulary.py's; they are read from here as before
(`schema.TIERS`, `schema.Field`)."""

from dataclasses import dataclass
from typing import Any

from controlplane.params.vocabulary import (  # noqa: F401 - the schema's vocabulary, read as schema.<NAME>
    DEFAULT_INTENT_TIERS,
    DEFAULT_STRICT_PATTERNS,
    INTENT_LABELS,
    MAX_GPU_MEMORY_UTILIZATION,
    MAX_PATTERN_LENGTH,
    MAX_PATTERNS,
    MODEL_NAME,
    QUANTIZATIONS,
    ROOT,
    SCENARIO_NAME,
    SERVED_MODEL_NAME,
    SPECULATIVE_METHODS,
    TIERS,
    Apply,
    Field,
)


def _int(path, apply, default, lo, hi, help_):
    return Field(path, "int", apply, default, help_, minimum=lo, maximum=hi)


def _float(path, apply, default, lo, hi, help_, exclusive_minimum=False):
    return Field(path, "float", apply, default, help_, lo, hi, exclusive_minimum)


FIELDS: tuple[Field, ...] = (
    _int("max_tokens.default", "hot", 256, 1, 32768, "First-turn cap on generated tokens."),
    _int(
        "max_tokens.streaming_threshold",
        "hot",
        200,
        1,
        32768,
        "A client that accepts JSON or a stream gets replies up to this many tokens whole, longer ones streamed.",
    ),
    Field(
        "max_tokens.whitelist",
        "names",
        "hot",
        ["legal"],
        "Whitelists of scenarios exempt from the cap (they keep the client's value up to the ceiling).",
    ),
    _int(
        "max_tokens.hard_ceiling",
        "hot",
        2048,
        1,
        131072,
        "Largest max_tokens a whitelisted scenario may ask for.",
    ),
    _int(
        "max_tokens.continuation_max_rounds",
        "hot",
        2,
        0,
        8,
        "Automatic continuations of a reply cut mid-sentence.",
    ),
    _float("temperature.strict", "hot", 0.3, 0, 2, "Payment amounts, order numbers, personal data."),
    _float("temperature.normal", "hot", 0.7, 0, 2, "Default tier."),
    _float("temperature.creative", "hot", 0.9, 0, 2, "Recommendations and copywriting only."),
    Field(
        "temperature.strict_patterns",
        "regexes",
        "hot",
        DEFAULT_STRICT_PATTERNS,
        "Regular expressions (RE2: linear time, no look-around or backreferences; \\d, \\s, \\w as in Python); a "
        "match in the user's message forces the strict tier.",
    ),
    Field(
        "intent.tiers",
        "tiers",
        "hot",
        DEFAULT_INTENT_TIERS,
        "Temperature tier for each intent label of the gateway classifier.",
    ),
    _float(
        "intent.confidence_floor",
        "hot",
        0.8,
        0,
        1,
        "Below this classifier confidence the normal tier is used.",
    ),
    _float(
        "intent.accuracy_floor",
        "hot",
        0.92,
        0,
        1,
        "A classifier model below this held-out accuracy cannot be published.",
    ),
    _int("batch.min_size", "hot", 2, 1, 1024, "Smallest admitted batch."),
    _int("batch.max_size", "hot", 8, 1, 1024, "Largest admitted batch."),
    _int("batch.timeout_ms", "hot", 50, 1, 10000, "Longest wait to fill a batch."),
    _int(
        "batch.long_context_threshold",
        "hot",
        2048,
        1,
        1048576,
        "Prompts above this many tokens use the separate long-context queue.",
    ),
    _int(
        "batch.long_context_max_size",
        "hot",
        2,
        1,
        1024,
        "Largest batch of long-context requests.",
    ),
    _int("batch.max_queue", "hot", 256, 1, 100000, "Waiting requests before new ones get 429."),
    _int(
        "batch.long_context_max_queue",
        "hot",
        16,
        1,
        100000,
        "Waiting long-context requests before new ones get 429.",
    ),
    Field("speculative.enabled", "bool", "cold", False, "Run vLLM with speculative decoding."),
    Field(
        "speculative.method",
        "enum",
        "cold",
        "draft_model",
        "vLLM speculative method: draft_model, eagle and eagle3 run the checkpoint in speculative.draft_model (a "
        "draft model; an EAGLE or EAGLE-3 head trained for the main model); ngram proposes from the prompt and needs "
        "none; mtp runs the main model's own multi-token-prediction layers (the node checks its config.json has "
        "some).",
        choices=SPECULATIVE_METHODS,
    ),
    Field(
        "speculative.draft_model",
        "model",
        "cold",
        None,
        "Draft model (methods draft_model, eagle, eagle3): a model catalog entry marked as a draft model. The node "
        "checks that its tokenizer files (an EAGLE head may have none) and its vocab_size are the main model's before "
        "it starts.",
        nullable=True,
    ),
    _int(
        "speculative.num_speculative_tokens",
        "cold",
        3,
        3,
        5,
        "Candidate tokens proposed per step (seed: 3-5).",
    ),
    _int(
        "speculative.prompt_lookup_min",
        "cold",
        1,
        1,
        16,
        "Method ngram: shortest n-gram looked up in the prompt to propose candidates (vLLM prompt_lookup_min).",
    ),
    _int(
        "speculative.prompt_lookup_max",
        "cold",
        4,
        1,
        16,
        "Method ngram: longest n-gram looked up in the prompt (vLLM prompt_lookup_max).",
    ),
    Field(
        "speculative.disable_above_batch_size",
        "int",
        "cold",
        None,
        "Speculate only while the running batch is at most this many requests (off under load); vLLM's "
        "num_speculative_tokens_per_batch_size schedule. Empty: at every batch size.",
        minimum=1,
        maximum=4096,
        nullable=True,
    ),
    _float(
        "speculative.rejection_threshold",
        "hot",
        0.4,
        0,
        1,
        "A window whose share of rejected draft tokens is above this counts as rejected (seed: 40 %).",
        exclusive_minimum=True,
    ),
    _int(
        "speculative.backoff_windows",
        "hot",
        3,
        1,
        100,
        "Consecutive rejected windows after which the node turns speculation off (seed: 3).",
    ),
    _int("speculative.window_s", "hot", 10, 1, 3600, "Length of one acceptance window, in seconds."),
    _float(
        "speculative.resume_below_tokens_per_s",
        "hot",
        15,
        0,
        100000,
        "Speculation that was turned off comes back only while generation is slower than this (tokens/s per "
        "request; seed: 15).",
        exclusive_minimum=True,
    ),
    _int(
        "speculative.probe_after_s",
        "hot",
        300,
        1,
        86400,
        "Time off before speculation is tried again (a probe); doubled after every probe that fails, up to 8x.",
    ),
    _float(
        "degradation.load_threshold",
        "hot",
        0.8,
        0,
        1,
        "Load above which the pool degrades.",
        exclusive_minimum=True,
    ),
    _float("degradation.exit_threshold", "hot", 0.6, 0, 1, "Load below which degradation ends."),
    _int("degradation.enter_after_s", "hot", 30, 1, 3600, "Seconds above the threshold before degrading."),
    _int("degradation.exit_after_s", "hot", 120, 1, 3600, "Seconds below the exit threshold before recovering."),
    _int("degradation.max_tokens", "hot", 128, 1, 32768, "max_tokens for every request while degraded."),
    _float("degradation.temperature", "hot", 0.7, 0, 2, "Temperature for every request while degraded."),
    Field(
        "degradation.speculative_decoding",
        "bool",
        "cold",
        False,
        "Keep speculative decoding while degraded (the seed turns it off).",
    ),
    Field(
        "engine.model",
        "model",
        "cold",
        None,
        "Model catalog entry the nodes run (its weights, tokenizer and revision); empty means the node's own model.",
        nullable=True,
    ),
    Field(
        "engine.served_model_name",
        "served_name",
        "cold",
        None,
        "Model name clients send: letters, digits, '.', '_', ':', '/' or '-', starting with a letter or digit.",
        nullable=True,
    ),
    _int("engine.max_num_seqs", "cold", 64, 1, 4096, "vLLM --max-num-seqs."),
    _int("engine.max_num_batched_tokens", "cold", 8192, 1, 1048576, "vLLM --max-num-batched-tokens."),
    _float(
        "engine.gpu_memory_utilization",
        "cold",
        0.9,
        0,
        MAX_GPU_MEMORY_UTILIZATION,
        "vLLM --gpu-memory-utilization: the share of the GPU vLLM takes (weights, activations and the KV cache it "
        "sizes to fill it). At most 0.95: the CUDA context and NCCL take theirs first, and vLLM refuses to start when "
        "the share is more than is free.",
        exclusive_minimum=True,
    ),
    Field(
        "engine.quantization",
        "enum",
        "cold",
        None,
        "vLLM --quantization; empty runs the checkpoint as it is. awq/awq_marlin need an AWQ checkpoint, gptq/"
        "gptq_marlin a GPTQ one; fp8 runs an FP8 checkpoint or quantizes an unquantized one while loading (the node "
        "checks the checkpoint's config.json).",
        choices=QUANTIZATIONS,
        nullable=True,
    ),
    Field("engine.enable_prefix_caching", "bool", "cold", True, "vLLM --enable-prefix-caching."),
    _int("engine.max_model_len", "cold", 8192, 16, 1048576, "vLLM --max-model-len."),
    # The seed's alert table puts memory fragmentation at 20 % warning, 35 % critical: a cleanup drains the node,
    # so it runs automatically at the critical level and the warning stays an alert for a person.
    _float(
        "cleanup.fragmentation_threshold",
        "hot",
        0.35,
        0,
        1,
        "Memory fragmentation above which a node cleans up by itself (drain, prefix-cache reset, release of "
        "cached allocator blocks, resume), one node of the pool at a time; 1 turns it off.",
        exclusive_minimum=True,
    ),
    _int(
        "cleanup.interval_s",
        "hot",
        0,
        0,
        604800,
        "Seconds between timed cleanups of each node (the seed's forced reclaim timer); 0 turns the timer off.",
    ),
    _int(
        "cleanup.cooldown_s",
        "hot",
        300,
        0,
        86400,
        "Least seconds between two automatic cleanups of a node, so one that cannot bring fragmentation down "
        "does not drain the node again and again.",
    ),
    _int(
        "cleanup.max_duration_s",
        "hot",
        60,
        5,
        3600,
        "Longest a cleanup may hold the node's gate closed, drain included; past it the node resumes and the "
        "cleanup is reported failed.",
    ),
    # The seed's cold-start plan (冷启动优化方案): load 5 % of the inference capacity, start at batch 2, re-evaluate
    # every 30 s, judge health on the latency distribution of the first 100 requests. Capacity is the engine's
    # max_num_seqs (the sequences it runs at once), so the ramp tops out at ceil(fraction x max_num_seqs).
    Field(
        "warmup.enabled", "bool", "hot", True, "Replay the pool's warmup dataset after every (re)start of the engine."
    ),
    _float(
        "warmup.capacity_fraction",
        "hot",
        0.05,
        0,
        1,
        "Share of the engine's capacity (engine.max_num_seqs concurrent sequences) the warmup may use at most; "
        "it never goes below warmup.initial_concurrency.",
        exclusive_minimum=True,
    ),
    _int("warmup.initial_concurrency", "hot", 2, 1, 256, "Warmup requests in flight at the start."),
    _int(
        "warmup.step_s",
        "hot",
        30,
        1,
        3600,
        "Seconds between two raises of the warmup concurrency (by one, while the latency stays healthy).",
    ),
    _int(
        "warmup.check_requests",
        "hot",
        100,
        1,
        100000,
        "The health check: the latency distribution of this many first warmup requests.",
    ),
    # 2.0 s is the seed's critical P99 level (监控阈值: P99 1.6 s warning, 2.0 s critical) and the p99-latency
    # alert's: a node that is already past it while warming would page the moment it took traffic.
    _float(
        "warmup.max_p99_s",
        "hot",
        2.0,
        0,
        600,
        "The check passes when the P99 latency of the first warmup.check_requests requests is at most this.",
        exclusive_minimum=True,
    ),
    _float(
        "warmup.max_error_rate",
        "hot",
        0.0,
        0,
        1,
        "The check passes when at most this share of the first warmup.check_requests requests failed.",
    ),
    _int(
        "warmup.max_duration_s",
        "hot",
        300,
        5,
        3600,
        "Longest a warmup may keep the node out of traffic; a check not reached by then fails.",
    ),
)

FIELDS_BY_PATH: dict[str, Field] = {f.path: f for f in FIELDS}
# Fields that name a model catalog entry; a config carries the resolved entries under `models`, keyed by these.
MODEL_REFERENCE_FIELDS: tuple[str, ...] = tuple(f.path for f in FIELDS if f.kind == "model")
# Fields templates no longer hold, and why; stored versions that have them keep loading (the value is dropped).
RETIRED_FIELDS: dict[str, str] = {
    "engine.tokenizer": "no longer a template field: the tokenizer comes from the model catalog entry in engine.model",
    "speculative.draft_tokenizer": (
        "no longer a template field: the node compares the draft's tokenizer files with the main model's"
    ),
}
SECTIONS: tuple[str, ...] = tuple(dict.fromkeys(f.section for f in FIELDS))


@dataclass(frozen=True)
class FieldError:
    """A validation failure at one path, rendered as `path: rule`."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"

    def as_dict(self) -> dict:
        spec = FIELDS_BY_PATH.get(self.path)
        return {"path": self.path, "message": self.message, "apply": spec.apply if spec else None}


def defaults() -> dict:
    """The effective parameters of an empty template."""
    doc: dict = {}
    for spec in FIELDS:
        section, key = spec.path.split(".", 1)
        doc.setdefault(section, {})[key] = _copy(spec.default)
    return doc


def effective(params: dict) -> dict:
    """Authored parameters with every omitted field filled from its default."""
    doc = defaults()
    for section, values in params.items():
        for key, value in values.items():
            spec = FIELDS_BY_PATH.get(f"{section}.{key}")
            if spec is None:  # a retired field of a version saved before it was retired
                continue
            if spec.kind == "tiers":
                # A partial intent map changes only the labels it names.
                doc[section][key].update(value)
            else:
                doc[section][key] = _copy(value)
    return doc


def in_schema_order(params: dict) -> dict:
    """Authored parameters with sections and fields in schema order (Postgres jsonb does not keep key order)."""
    ordered: dict = {}
    for spec in FIELDS:
        section, key = spec.path.split(".", 1)
        values = params.get(section) or {}
        if key in values:
            value = values[key]
            if spec.kind == "tiers":
                value = {label: value[label] for label in INTENT_LABELS if label in value}
            ordered.setdefault(section, {})[key] = value
    return ordered


def flatten(params: dict) -> dict[str, Any]:
    return {f"{section}.{key}": value for section, values in params.items() for key, value in values.items()}


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, list):
        return list(value)
    return value
