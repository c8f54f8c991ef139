"""Validation of a template document against the schema: per-field rules, then cross-field rules."""

import math
from typing import Any

from controlplane.params.schema import (
    FIELDS,
    FIELDS_BY_PATH,
    INTENT_LABELS,
    MAX_PATTERN_LENGTH,
    MAX_PATTERNS,
    MODEL_NAME,
    RETIRED_FIELDS,
    ROOT,
    SCENARIO_NAME,
    SECTIONS,
    SERVED_MODEL_NAME,
    TIERS,
    Field,
    FieldError,
    effective,
)
from engine_node.model_sources import DRAFT_METHODS, DRAFT_NEED
from engine_node.policy.pattern_cost import TooCostly, check_template
from engine_node.policy.patterns import PatternRejected, compile_pattern, pattern_cost


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
            if path in RETIRED_FIELDS:
                errors.append(FieldError(path, RETIRED_FIELDS[path]))
                continue
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
    if spec.kind == "model":
        if not isinstance(value, str) or not MODEL_NAME.match(value):
            return [
                FieldError(
                    path,
                    f"must name a model catalog entry (lowercase letters, digits, '.', '_' or '-', starting with a "
                    f"letter or digit); got {_shown(value)}",
                )
            ]
        return []
    if spec.kind == "served_name":
        if not isinstance(value, str) or not SERVED_MODEL_NAME.match(value):
            return [
                FieldError(
                    path,
                    f"must be 1-128 letters, digits, '.', '_', ':', '/' or '-', starting with a letter or digit; "
                    f"got {_shown(value)}",
                )
            ]
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
    errors, costs, over_budget = [], [], False
    for i, pattern in enumerate(value):
        item = f"{path}[{i}]"
        if not isinstance(pattern, str) or not pattern:
            errors.append(FieldError(item, "must be a non-empty string"))
        elif len(pattern) > MAX_PATTERN_LENGTH:
            errors.append(FieldError(item, f"must be at most {MAX_PATTERN_LENGTH} characters"))
        else:
            # The node's own compiler and cost bound: what passes here is what the agent accepts. Once the list is over
            # its budget, the rest get RE2's verdict only (counting their states would change nothing).
            try:
                compile_pattern(pattern, item, bounded=False)
                if not over_budget:
                    costs.append(pattern_cost(pattern, item))
                    check_template(costs)
            except PatternRejected as exc:
                errors.append(FieldError(item, exc.message))
            except TooCostly as exc:
                errors.append(FieldError(path, str(exc)))
                over_budget = True
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
    # Whether a draft shares the main model's tokenizer and vocabulary, and whether the main model has the MTP layers
    # method mtp runs, is decided on the node, on the files (tokenizer_files.py, checkpoints.py).
    if spec["enabled"] and spec["method"] in DRAFT_METHODS and not spec["draft_model"]:
        method = spec["method"]
        errors.append(FieldError("speculative.draft_model", f"required when method is {method} ({DRAFT_NEED[method]})"))
    if eng["max_num_batched_tokens"] < eng["max_num_seqs"]:
        errors.append(
            FieldError(
                "engine.max_num_batched_tokens",
                f"must be at least engine.max_num_seqs ({eng['max_num_seqs']}): vLLM schedules a token of every "
                "running sequence in one step",
            )
        )
    if spec["prompt_lookup_min"] > spec["prompt_lookup_max"]:
        errors.append(
            FieldError(
                "speculative.prompt_lookup_min",
                f"must be at most speculative.prompt_lookup_max ({spec['prompt_lookup_max']})",
            )
        )
    limit = spec["disable_above_batch_size"]
    if limit is not None and limit >= eng["max_num_seqs"]:
        errors.append(
            FieldError(
                "speculative.disable_above_batch_size",
                f"must be below engine.max_num_seqs ({eng['max_num_seqs']}), or empty to speculate at every batch size",
            )
        )
    return errors


def _shown(value: Any) -> str:
    return repr(value[:80]) if isinstance(value, str) else _type_name(value)


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
