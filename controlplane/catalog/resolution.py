"""Model references of templates: catalog names resolved to entries when a version is saved, checked again at publish.

A version pins the entries it resolved to (`TemplateVersion.models`), so publishing or rolling back to it runs
exactly what was reviewed, and a catalog edit reaches the nodes only through a new, published version. Problems
are `(field path, message)` pairs; the template and pool services turn them into their own errors.
"""

from controlplane.catalog.models import ModelEntry
from engine_node.engine_flags import FlagRefused, check_value
from engine_node.model_sources import DRAFT_METHODS

MODEL_FIELD = "engine.model"
DRAFT_FIELD = "speculative.draft_model"
# Template field -> whether the model named there must be marked as a draft model.
REFERENCES = {MODEL_FIELD: False, DRAFT_FIELD: True}
_LISTED = 10

Problems = list[tuple[str, str]]


def referenced_names(params: dict) -> dict[str, str | None]:
    """The catalog name each reference field of these effective parameters holds (None: not set)."""
    names = {}
    for field in REFERENCES:
        section, key = field.split(".", 1)
        names[field] = (params.get(section) or {}).get(key)
    return names


def references_resolve(params: dict) -> tuple[dict, Problems]:
    """Resolve the effective parameters' model references against the catalog as it is now."""
    names = referenced_names(params)
    entries = {e.name: e for e in ModelEntry.objects.filter(name__in=[n for n in names.values() if n])}
    resolved: dict = {}
    problems: Problems = []
    for field, must_draft in REFERENCES.items():
        name = names[field]
        resolved[field] = None
        if not name:
            continue
        entry = entries.get(name)
        if entry is None:
            problems.append((field, f"{name!r} is not in the model catalog ({_known()})"))
        elif must_draft and not entry.is_draft_capable:
            problems.append((field, f"{name!r} is not marked as a draft model in the catalog"))
        else:
            resolved[field] = entry.resolved()
            problems += _value_problems(field, resolved[field])
    problems += _trust_problems(params, resolved)
    return resolved, problems


def pinned_problems(params: dict, pinned: dict) -> Problems:
    """Why a saved version's pinned entries may not go to the nodes now, if they may not.

    A reference without a pinned entry (a version saved before the catalog), a value the engine rule refuses, or a
    pinned trust_remote_code grant the catalog has withdrawn since (an admin's decision outlives old versions)."""
    names = referenced_names(params)
    current = {e.name: e for e in ModelEntry.objects.filter(name__in=[n for n in names.values() if n])}
    problems: Problems = []
    for field, name in names.items():
        if not name:
            continue
        entry = pinned.get(field)
        if not isinstance(entry, dict) or entry.get("name") != name:
            problems.append(
                (field, f"{name!r} was saved without a catalog entry; save a new version that names a catalog model")
            )
            continue
        problems += _value_problems(field, entry)
        now = current.get(name)
        if entry.get("trust_remote_code") and not (now and now.trust_remote_code):
            problems.append(
                (
                    field,
                    f"{name!r} may no longer run remote code (the catalog entry changed); save a new version to use "
                    "the entry as it is now",
                )
            )
    return problems


def _value_problems(field: str, entry: dict) -> Problems:
    problems = []
    for key in ("name", "source", "tokenizer", "revision", "tokenizer_revision"):
        value = entry.get(key) or ""
        if key in ("name", "source") or value:
            try:
                check_value(field, value)
            except FlagRefused as exc:
                problems.append((field, f"{key}: {exc.message}"))
    return problems


def _trust_problems(params: dict, resolved: dict) -> Problems:
    spec = params.get("speculative") or {}
    main, draft = resolved.get(MODEL_FIELD), resolved.get(DRAFT_FIELD)
    uses_draft = spec.get("enabled") and spec.get("method") in DRAFT_METHODS
    if uses_draft and main and draft and main["trust_remote_code"] and not draft["trust_remote_code"]:
        # vLLM loads a draft model with the main model's trust_remote_code.
        return [
            (
                DRAFT_FIELD,
                f"{draft['name']!r} is not allowed to run remote code, but vLLM would load it with "
                f"{main['name']!r}'s trust_remote_code",
            )
        ]
    return []


def _known() -> str:
    names = list(ModelEntry.objects.values_list("name", flat=True)[: _LISTED + 1])
    if not names:
        return "the catalog is empty: an SRE registers models under Models"
    listed = ", ".join(names[:_LISTED]) + (", ..." if len(names) > _LISTED else "")
    return f"registered: {listed}"
