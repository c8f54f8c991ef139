"""Reading and writing template documents as YAML (the seed's layout) and JSON."""

import json
from typing import Any

import yaml
from django.conf import settings

from controlplane.params.exceptions import DocumentInvalid
from controlplane.params.schema import FieldError

FORMATS = ("yaml", "json")


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys instead of keeping the last one silently."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            mark = key_node.start_mark
            raise DocumentInvalid(
                "document is not valid YAML",
                errors=[FieldError(str(key), f"duplicate key at line {mark.line + 1}")],
            )
        seen[key] = loader.construct_object(value_node, deep=deep)
    return seen


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def parse(text: str | bytes, fmt: str) -> Any:
    """Parse a document, refusing oversize input and naming the line of a syntax error."""
    if fmt not in FORMATS:
        raise DocumentInvalid("unknown format", errors=[FieldError("format", f"must be one of {', '.join(FORMATS)}")])
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise DocumentInvalid("document is not UTF-8", errors=[FieldError("(document)", "must be UTF-8 text")]) from None
    limit = settings.TEMPLATE_MAX_BYTES
    size = len(text.encode("utf-8"))
    if size > limit:
        raise DocumentInvalid(
            "document too large",
            errors=[FieldError("(document)", f"must be at most {limit} bytes, got {size}")],
        )
    if fmt == "json":
        try:
            return json.loads(text, object_pairs_hook=_json_object)
        except json.JSONDecodeError as exc:
            raise DocumentInvalid(
                "document is not valid JSON",
                errors=[FieldError("(document)", f"invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}")],
            ) from None
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise DocumentInvalid(
            "document is not valid YAML",
            errors=[FieldError("(document)", f"invalid YAML{where}: {problem}")],
        ) from None


def _json_object(pairs: list[tuple[str, Any]]) -> dict:
    obj: dict = {}
    for key, value in pairs:
        if key in obj:
            raise DocumentInvalid("document is not valid JSON", errors=[FieldError(key, "duplicate key")])
        obj[key] = value
    return obj


def dump(document: dict, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    return "".join(_yaml_lines(document, 0))


def _yaml_lines(mapping: dict, indent: int):
    """The seed's layout: two-space block mappings, scalar lists in flow style with double quotes."""
    pad = " " * indent
    for key, value in mapping.items():
        if isinstance(value, dict):
            if value:
                yield f"{pad}{key}:\n"
                yield from _yaml_lines(value, indent + 2)
            else:
                yield f"{pad}{key}: {{}}\n"
        elif isinstance(value, list):
            yield f"{pad}{key}: [{', '.join(_scalar(v) for v in value)}]\n"
        else:
            yield f"{pad}{key}: {_scalar(value)}\n"


def _scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    # JSON string syntax is YAML's double-quoted scalar, escapes included.
    return json.dumps(value, ensure_ascii=False)
