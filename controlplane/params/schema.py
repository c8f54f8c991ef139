"""The one schema of a parameter template: every field, its default, its range and hot/cold tag."""

import math
import re
from dataclasses import dataclass, field
from typing import Any, Literal

ROOT = "inference_params"
Apply = Literal["hot", "cold"]

INTENT_LABELS = (
    "order_status",
    "return_refund",
    "product_recommendation",
    "payment_billing",
    "coupon_promotion",
    "account_privacy",
    "legal_policy",
    "copywriting",
    "other",
)
TIERS = ("strict", "normal", "creative")
SPECULATIVE_METHODS = ("draft_model", "ngram", "eagle", "eagle3", "mtp")
QUANTIZATIONS = ("awq", "awq_marlin", "gptq", "gptq_marlin", "fp8", "bitsandbytes")
SCENARIO_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
MAX_PATTERNS = 64
MAX_PATTERN_LENGTH = 500

# Payment amounts, order numbers, mainland phone numbers and resident ID numbers force strict (seed).
DEFAULT_STRICT_PATTERNS = [
    r"[¥￥$]\s?\d+(?:[.,]\d{1,2})?|\d+(?:\.\d{1,2})?\s?(?:元|块|RMB|CNY|USD)",
    r"(?i)(?:订单号?|order\s*(?:no\.?|number|id|#))\s*[:：#]?\s*[A-Za-z0-9-]{6,}",
    r"(?<!\d)1[3-9]\d{9}(?!\d)",
    r"(?<!\d)\d{17}[\dXx](?!\d)",
]
DEFAULT_INTENT_TIERS = {
    "order_status": "strict",
    "return_refund": "normal",
    "product_recommendation": "creative",
    "payment_billing": "strict",
    "coupon_promotion": "normal",
    "account_privacy": "strict",
    "legal_policy": "strict",
    "copywriting": "creative",
    "other": "normal",
}


@dataclass(frozen=True)
class Field:
    """One leaf of the document: `hot` applies per request at the gateway, `cold` restarts vLLM."""

    path: str
    kind: Literal["int", "float", "bool", "str", "enum", "names", "regexes", "tiers"]
    apply: Apply
    default: Any
    help: str
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: bool = False
    choices: tuple[str, ...] = ()
    nullable: bool = False
    extra: dict = field(default_factory=dict)

    @property
    def section(self) -> str:
        return self.path.split(".", 1)[0]


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
        "Replies expected past this many tokens are streamed to the client.",
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
        "Regular expressions (Python syntax); a match in the user's message forces the strict tier.",
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
        "vLLM speculative method.",
        choices=SPECULATIVE_METHODS,
    ),
    Field(
        "speculative.draft_model",
        "str",
        "cold",
        None,
        "Draft model path or name (method draft_model).",
        nullable=True,
    ),
    Field(
        "speculative.draft_tokenizer",
        "str",
        "cold",
        None,
        "Tokenizer of the draft model; must equal engine.tokenizer.",
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
    Field("engine.model", "str", "cold", None, "Model path; empty means the node's own.", nullable=True),
    Field(
        "engine.tokenizer",
        "str",
        "cold",
        None,
        "Tokenizer path; empty means the model's own.",
        nullable=True,
    ),
    Field("engine.served_model_name", "str", "cold", None, "Model name clients send.", nullable=True),
    _int("engine.max_num_seqs", "cold", 64, 1, 4096, "vLLM --max-num-seqs."),
    _int("engine.max_num_batched_tokens", "cold", 8192, 1, 1048576, "vLLM --max-num-batched-tokens."),
    _float(
        "engine.gpu_memory_utilization",
        "cold",
        0.9,
        0,
        1,
        "vLLM --gpu-memory-utilization.",
        exclusive_minimum=True,
    ),
    Field(
        "engine.quantization",
        "enum",
        "cold",
        None,
        "vLLM --quantization; empty for none.",
        choices=QUANTIZATIONS,
        nullable=True,
    ),
    Field("engine.enable_prefix_caching", "bool", "cold", True, "vLLM --enable-prefix-caching."),
    _int("engine.max_model_len", "cold", 8192, 16, 1048576, "vLLM --max-model-len."),
)

FIELDS_BY_PATH: dict[str, Field] = {f.path: f for f in FIELDS}
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
            if FIELDS_BY_PATH[f"{section}.{key}"].kind == "tiers":
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


def validate(document: Any) -> tuple[dict, list[FieldError]]:
    """Check a whole document ({inference_params: {...}}); return its authored parameters and errors."""
    errors: list[FieldError] = []
    if not isinstance(document, dict):
        return {}, [FieldError("(document)", f"must be a mapping with the key {ROOT!r}")]
    for key in document:
        if key != ROOT:
            errors.append(FieldError(str(key), f"unknown field; the document's only key is {ROOT!r}"))
    if ROOT not in document:
        errors.append(FieldError(ROOT, "required"))
        return {}, errors
    params = document[ROOT]
    if params is None:
        params = {}
    if not isinstance(params, dict):
        return {}, [*errors, FieldError(ROOT, "must be a mapping of sections")]
    for section, values in params.items():
        if section not in SECTIONS:
            errors.append(FieldError(str(section), f"unknown section; expected one of {', '.join(SECTIONS)}"))
            continue
        if values is None:
            continue
        if not isinstance(values, dict):
            errors.append(FieldError(section, "must be a mapping"))
            continue
        for key, value in values.items():
            path = f"{section}.{key}"
            spec = FIELDS_BY_PATH.get(path)
            if spec is None:
                known = ", ".join(f.path.split(".", 1)[1] for f in FIELDS if f.section == section)
                errors.append(FieldError(path, f"unknown field; {section} has {known}"))
                continue
            errors.extend(_check_field(spec, value))
    if errors:
        return {}, errors
    authored = {s: dict(v) for s, v in params.items() if v}
    errors.extend(_check_cross_fields(effective(authored)))
    return authored, errors


def _check_field(spec: Field, value: Any) -> list[FieldError]:
    path = spec.path
    if value is None:
        return [] if spec.nullable else [FieldError(path, "must not be empty")]
    if spec.kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            return [FieldError(path, f"must be an integer, got {_type_name(value)}")]
        return _check_range(spec, value)
    if spec.kind == "float":
        if isinstance(value, bool) or not isinstance(value, int | float):
            return [FieldError(path, f"must be a number, got {_type_name(value)}")]
        return _check_range(spec, value)
    if spec.kind == "bool":
        if not isinstance(value, bool):
            return [FieldError(path, f"must be true or false, got {_type_name(value)}")]
        return []
    if spec.kind == "str":
        if not isinstance(value, str):
            return [FieldError(path, f"must be a string, got {_type_name(value)}")]
        if not value.strip() or len(value) > 512:
            return [FieldError(path, "must be 1 to 512 characters")]
        return []
    if spec.kind == "enum":
        if value not in spec.choices:
            return [FieldError(path, f"must be one of {', '.join(spec.choices)}; got {value!r}")]
        return []
    if spec.kind == "names":
        return _check_names(path, value)
    if spec.kind == "regexes":
        return _check_regexes(path, value)
    return _check_tiers(path, value)


def _check_range(spec: Field, value: float) -> list[FieldError]:
    lo, hi = spec.minimum, spec.maximum
    if not math.isfinite(value):
        return [FieldError(spec.path, f"must be a finite number, got {value}")]
    too_low = value <= lo if spec.exclusive_minimum else value < lo
    if too_low or value > hi:
        lower = f"greater than {_num(lo)} and at most" if spec.exclusive_minimum else f"between {_num(lo)} and"
        return [FieldError(spec.path, f"must be {lower} {_num(hi)}, got {value}")]
    return []


def _check_names(path: str, value: Any) -> list[FieldError]:
    if not isinstance(value, list):
        return [FieldError(path, f"must be a list of names, got {_type_name(value)}")]
    errors = []
    for i, name in enumerate(value):
        if not isinstance(name, str) or not SCENARIO_NAME.match(name):
            errors.append(FieldError(f"{path}[{i}]", "must be a lowercase name of letters, digits, _ or -"))
    if len(set(map(str, value))) != len(value):
        errors.append(FieldError(path, "must not list a name twice"))
    return errors


def _check_regexes(path: str, value: Any) -> list[FieldError]:
    if not isinstance(value, list):
        return [FieldError(path, f"must be a list of regular expressions, got {_type_name(value)}")]
    if len(value) > MAX_PATTERNS:
        return [FieldError(path, f"must hold at most {MAX_PATTERNS} patterns")]
    errors = []
    for i, pattern in enumerate(value):
        item = f"{path}[{i}]"
        if not isinstance(pattern, str) or not pattern:
            errors.append(FieldError(item, "must be a non-empty string"))
        elif len(pattern) > MAX_PATTERN_LENGTH:
            errors.append(FieldError(item, f"must be at most {MAX_PATTERN_LENGTH} characters"))
        else:
            try:
                re.compile(pattern)
            except re.error as exc:
                errors.append(FieldError(item, f"is not a valid regular expression: {exc}"))
    return errors


def _check_tiers(path: str, value: Any) -> list[FieldError]:
    if not isinstance(value, dict):
        return [FieldError(path, f"must map intent labels to tiers, got {_type_name(value)}")]
    errors = []
    for label, tier in value.items():
        if label not in INTENT_LABELS:
            errors.append(FieldError(f"{path}.{label}", f"unknown intent; expected one of {', '.join(INTENT_LABELS)}"))
        elif tier not in TIERS:
            errors.append(FieldError(f"{path}.{label}", f"must be one of {', '.join(TIERS)}; got {tier!r}"))
    return errors


def _check_cross_fields(p: dict) -> list[FieldError]:
    errors = []
    mt, temp, batch, spec, deg, eng = (
        p["max_tokens"],
        p["temperature"],
        p["batch"],
        p["speculative"],
        p["degradation"],
        p["engine"],
    )
    if batch["min_size"] > batch["max_size"]:
        errors.append(FieldError("batch.min_size", f"must be at most batch.max_size ({batch['max_size']})"))
    if batch["long_context_max_size"] > batch["max_size"]:
        errors.append(
            FieldError("batch.long_context_max_size", f"must be at most batch.max_size ({batch['max_size']})")
        )
    if batch["long_context_threshold"] >= eng["max_model_len"]:
        errors.append(
            FieldError(
                "batch.long_context_threshold",
                f"must be below engine.max_model_len ({eng['max_model_len']})",
            )
        )
    if mt["streaming_threshold"] > mt["default"]:
        errors.append(
            FieldError("max_tokens.streaming_threshold", f"must be at most max_tokens.default ({mt['default']})")
        )
    if mt["hard_ceiling"] < mt["default"]:
        errors.append(FieldError("max_tokens.hard_ceiling", f"must be at least max_tokens.default ({mt['default']})"))
    if not temp["strict"] <= temp["normal"] <= temp["creative"]:
        errors.append(FieldError("temperature", "tiers must be ordered: strict <= normal <= creative"))
    if deg["exit_threshold"] >= deg["load_threshold"]:
        errors.append(
            FieldError(
                "degradation.exit_threshold",
                f"must be below degradation.load_threshold ({_num(deg['load_threshold'])})",
            )
        )
    if deg["max_tokens"] > mt["default"]:
        errors.append(FieldError("degradation.max_tokens", f"must be at most max_tokens.default ({mt['default']})"))
    if spec["enabled"] and spec["method"] == "draft_model":
        if not spec["draft_model"]:
            errors.append(FieldError("speculative.draft_model", "required when method is draft_model"))
        if not eng["tokenizer"]:
            errors.append(
                FieldError("engine.tokenizer", "required with a draft model, to prove both share one tokenizer")
            )
        elif spec["draft_tokenizer"] != eng["tokenizer"]:
            errors.append(
                FieldError(
                    "speculative.draft_tokenizer",
                    f"must equal engine.tokenizer ({eng['tokenizer']!r}): "
                    "a draft model must share the main model's tokenizer",
                )
            )
    return errors


def _type_name(value: Any) -> str:
    return {
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "a mapping",
    }.get(type(value), type(value).__name__)


def _num(value: float) -> str:
    return f"{value:g}"


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, list):
        return list(value)
    return value
