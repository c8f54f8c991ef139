"""The models a pushed config runs: the catalog entries the control plane resolved, and the node's own allow-list.

A config names models by catalog name (`engine.model`, `speculative.draft_model`) and carries the entries the
control plane resolved them to under `content["models"]`, keyed by those field paths:

    {"name": "qwen3-0.6b", "source": "/srv/models/qwen3-0.6b" or "Qwen/Qwen3-0.6B", "tokenizer": "",
     "revision": "", "tokenizer_revision": "", "trust_remote_code": false, "is_draft_capable": false}

The agent trusts none of it beyond what its operator allowed at start (`--model-dir`, `--allow-model`,
`--allow-trust-remote-code`), so a compromised control plane can make a node run no more than a published
template could. Every refusal names the template field, and the node keeps serving its last good config.
"""

import os
from dataclasses import dataclass
from pathlib import Path

from engine_node.engine_flags import FlagRefused, check_value

MODEL_FIELD = "engine.model"
DRAFT_FIELD = "speculative.draft_model"
# speculative.method values that run a second checkpoint (vLLM's --speculative-config `model`): a draft model, or an
# EAGLE head trained for the main model. ngram needs none; mtp runs the main model's own MTP layers. The control
# plane's validation imports this.
DRAFT_METHODS = ("draft_model", "eagle", "eagle3")
DRAFT_NEED = {
    "draft_model": "a smaller model with the main model's tokenizer",
    "eagle": "an EAGLE head trained for the main model",
    "eagle3": "an EAGLE-3 head trained for the main model",
}
_TEXT_KEYS = ("source", "tokenizer", "revision", "tokenizer_revision")
_BOOL_KEYS = ("trust_remote_code", "is_draft_capable")


@dataclass(frozen=True)
class ModelEntry:
    """One resolved catalog entry; `name` is empty for the node's own model (`--model` at the agent's start)."""

    name: str
    source: str
    tokenizer: str = ""
    revision: str = ""
    tokenizer_revision: str = ""
    trust_remote_code: bool = False
    is_draft_capable: bool = False

    @property
    def label(self) -> str:
        return repr(self.name) if self.name else f"the node's own model {self.source!r}"

    @property
    def tokenizer_source(self) -> tuple[str, str]:
        """Where the tokenizer files come from, and at which revision (vLLM's default: the model's revision)."""
        if self.tokenizer:
            return self.tokenizer, self.tokenizer_revision
        return self.source, self.tokenizer_revision or self.revision


@dataclass(frozen=True)
class ConfigModels:
    """The main model a config runs and its draft model, if speculative decoding uses one."""

    main: ModelEntry
    draft: ModelEntry | None


def config_models(content: dict, own_model: str) -> ConfigModels:
    """Read and check the resolved entries of a config's content; raises FlagRefused naming the field."""
    engine, spec = content.get("engine") or {}, content.get("speculative") or {}
    resolved = content.get("models") or {}
    if not isinstance(resolved, dict):
        raise FlagRefused("models", "must map template fields to resolved catalog entries")
    name = engine.get("model")
    main = _entry(MODEL_FIELD, name, resolved.get(MODEL_FIELD)) if name else ModelEntry(name="", source=own_model)
    draft = None
    method = spec.get("method")
    if spec.get("enabled") and method in DRAFT_METHODS:
        draft_name = spec.get("draft_model")
        if not draft_name:
            raise FlagRefused(DRAFT_FIELD, f"required when speculative.method is {method} ({DRAFT_NEED[method]})")
        draft = _entry(DRAFT_FIELD, draft_name, resolved.get(DRAFT_FIELD))
        if not draft.is_draft_capable:
            raise FlagRefused(DRAFT_FIELD, f"{draft_name!r} is not marked as a draft model in the catalog")
        if main.trust_remote_code and not draft.trust_remote_code:
            # vLLM loads the draft with the main model's trust_remote_code: the draft would run code nobody allowed.
            raise FlagRefused(
                DRAFT_FIELD,
                f"{draft_name!r} is not allowed to run remote code, but vLLM would load it with the main model's "
                "trust_remote_code",
            )
    return ConfigModels(main=main, draft=draft)


def _entry(field: str, name, entry) -> ModelEntry:
    if not isinstance(name, str):
        raise FlagRefused(field, "must name a model catalog entry")
    check_value(field, name)
    if not isinstance(entry, dict):
        raise FlagRefused(field, f"{name!r} comes without its resolved catalog entry")
    if entry.get("name") != name:
        raise FlagRefused(field, f"the resolved catalog entry is {entry.get('name')!r}, not {name!r}")
    values: dict = {"name": name}
    for key in _TEXT_KEYS:
        value = entry.get(key, "")
        if key == "source" or value:
            check_value(field if key == "source" else f"{field} ({key})", value)
        values[key] = value or ""
    for key in _BOOL_KEYS:
        if not isinstance(entry.get(key, False), bool):
            raise FlagRefused(field, f"{key} of {name!r} must be true or false")
        values[key] = entry.get(key, False)
    return ModelEntry(**values)


class ModelAllowList:
    """What the operator allowed this node to load: models under `model_dirs`, the exact names in `allowed` (repo
    ids or paths), the agent's own `--model`, and remote code only with `allow_trust_remote_code`."""

    def __init__(self, *, model_dirs: list[Path], allowed: list[str], own_model: str, allow_trust_remote_code: bool):
        self.model_dirs = [os.path.realpath(d) for d in model_dirs]
        self.allowed = set(allowed)
        self.own_model = own_model
        self.allow_trust_remote_code = allow_trust_remote_code

    def allows(self, source: str) -> bool:
        if source == self.own_model or source in self.allowed:
            return True
        if not os.path.isabs(source):
            return False
        # realpath resolves every symlink, so a link under the directory that points outside it stays outside.
        real = os.path.realpath(source)
        return os.path.exists(real) and any(
            real != root and os.path.commonpath([real, root]) == root for root in self.model_dirs
        )

    def check(self, models: ConfigModels) -> None:
        """Raise FlagRefused naming the field of the first model, tokenizer or remote-code grant not allowed."""
        for field, entry in ((MODEL_FIELD, models.main), (DRAFT_FIELD, models.draft)):
            if entry is None:
                continue
            for what, source in (("", entry.source), ("tokenizer ", entry.tokenizer)):
                if source and not self.allows(source):
                    raise FlagRefused(field, f"{what}{source!r} is not allowed on this node ({self.describe()})")
        if models.main.trust_remote_code and not self.allow_trust_remote_code:
            raise FlagRefused(
                MODEL_FIELD,
                f"{models.main.name!r} needs trust_remote_code, which this node does not allow "
                "(the agent's operator decides, with --allow-trust-remote-code)",
            )

    def describe(self) -> str:
        parts = [f"models under {', '.join(self.model_dirs)}"] if self.model_dirs else []
        names = sorted(self.allowed | {self.own_model})
        parts.append(f"{', '.join(names)} (--model, --allow-model)")
        return "it allows " + " and ".join(parts)
