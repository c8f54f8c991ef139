"""The fixed table of vLLM server options a pushed config may set, and how a value becomes one argv element.

A template is data, never a command line: every option the agent passes for a config comes from `FLAGS`, and
each is rendered as a single `--flag=value` element. vLLM's parser (argparse under vLLM 0.32's
FlexibleArgumentParser) then reads the whole value as that option's value, whatever it contains; the two-element
form (`--model`, value) let a value such as `--trust-remote-code.x` be read as a flag of its own. Values that
start with `-` are refused all the same, here and in the control plane, so no reader can mistake one for a flag.
Switches (`--trust-remote-code`, `--enable-prefix-caching`) are one element with no value.

The control plane imports `check_value` for its own validation, so both sides apply the same rule.
"""

import json
import math
import re
from dataclasses import dataclass
from typing import Any, Literal

MAX_VALUE_LENGTH = 4096
# Control characters (newlines, NUL, escapes) never belong in a model path, a name or a JSON config.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class FlagRefused(ValueError):
    """A value the table will not render; `field` names the config field it came from."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True)
class EngineFlag:
    """One vLLM 0.32 server option: its spelling and the kind of value it takes."""

    option: str
    kind: Literal["text", "int", "float", "switch", "bool", "json"]
    help: str


# Names and kinds checked against vLLM 0.32.0's own parser (vllm.entrypoints.launchers.cli_args.make_arg_parser).
FLAGS: dict[str, EngineFlag] = {
    "model": EngineFlag("--model", "text", "weights: a directory on the node or a Hugging Face repo id"),
    "revision": EngineFlag("--revision", "text", "pinned revision (branch, tag or commit) of the model"),
    "tokenizer": EngineFlag("--tokenizer", "text", "tokenizer directory or repo id when not the model's own"),
    "tokenizer_revision": EngineFlag("--tokenizer-revision", "text", "pinned revision of the tokenizer"),
    "trust_remote_code": EngineFlag("--trust-remote-code", "switch", "run the model repository's own Python code"),
    "served_model_name": EngineFlag("--served-model-name", "text", "the model name clients send"),
    "max_num_seqs": EngineFlag("--max-num-seqs", "int", "most sequences in one batch"),
    "max_num_batched_tokens": EngineFlag("--max-num-batched-tokens", "int", "token budget of one engine step"),
    "gpu_memory_utilization": EngineFlag("--gpu-memory-utilization", "float", "share of GPU memory vLLM may take"),
    "max_model_len": EngineFlag("--max-model-len", "int", "prompt plus reply limit in tokens"),
    "quantization": EngineFlag("--quantization", "text", "quantization method of the weights"),
    "enable_prefix_caching": EngineFlag("--enable-prefix-caching", "bool", "reuse KV blocks of seen prefixes"),
    "speculative_config": EngineFlag("--speculative-config", "json", "speculative decoding, as a JSON object"),
}


def check_value(field: str, value: Any) -> str:
    """The rule for every text that may reach the engine's command line; return it or raise FlagRefused."""
    if not isinstance(value, str):
        raise FlagRefused(field, f"must be a string, got {type(value).__name__}")
    if not value:
        raise FlagRefused(field, "must not be empty")
    if value.startswith("-"):
        raise FlagRefused(field, f"{value[:80]!r} starts with '-': an engine value never may")
    if _CONTROL.search(value):
        raise FlagRefused(field, "must not contain control characters (newlines, NUL, ...)")
    if len(value) > MAX_VALUE_LENGTH:
        raise FlagRefused(field, f"must be at most {MAX_VALUE_LENGTH} characters")
    return value


def render(name: str, value: Any, *, field: str) -> str | None:
    """`--flag=value` for the option `name`; None for a switch that is off. Raises FlagRefused on a bad value."""
    flag = FLAGS[name]
    if flag.kind == "switch":
        if not isinstance(value, bool):
            raise FlagRefused(field, f"must be true or false, got {type(value).__name__}")
        return flag.option if value else None
    if flag.kind == "bool":
        if not isinstance(value, bool):
            raise FlagRefused(field, f"must be true or false, got {type(value).__name__}")
        return flag.option if value else "--no-" + flag.option.removeprefix("--")
    if flag.kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise FlagRefused(field, f"must be an integer, got {type(value).__name__}")
        text = str(value)
    elif flag.kind == "float":
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise FlagRefused(field, f"must be a finite number, got {value!r}")
        text = repr(float(value))
    elif flag.kind == "json":
        if not isinstance(value, dict):
            raise FlagRefused(field, "must be a JSON object")
        for key, item in value.items():
            if isinstance(item, str):
                check_value(f"{field}.{key}", item)
        text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    else:
        text = value
    # Numbers can be negative; no option of the table takes a negative value, so the rule holds for them too.
    check_value(field, text)
    return f"{flag.option}={text}"
