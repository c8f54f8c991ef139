"""Reading and writing template documents as YAML (the seed's layout) and JSON."""

import json
from collections.abc import Hashable
from typing import Any

import yaml
from django.conf import settings

from controlplane.params.exceptions import DocumentInvalid
from controlplane.params.schema import ROOT, FieldError

FORMATS = ("yaml", "json")
_TOO_DEEP = FieldError("(document)", "is nested too deeply")


class _StrictLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """Safe loader (libyaml when present) that refuses duplicate keys instead of keeping the last one."""

    def __init__(self, stream):
        super().__init__(stream)
        # Dotted path of each mapping node, so a duplicate key is reported as e.g. `temperature.strict`.
        self.paths: dict[yaml.Node, str] = {}

    def construct_document(self, node):
        _refuse_aliases(node)
        return super().construct_document(node)


def _refuse_aliases(root: yaml.Node) -> None:
    """An alias repeats a node, so a few hundred bytes could expand to gigabytes (or recurse); refuse them."""
    seen: set[int] = set()
    stack: list[tuple[yaml.Node, str]] = [(root, "")]
    while stack:
        node, path = stack.pop()
        if id(node) in seen:
            raise DocumentInvalid(
                "document is not valid YAML",
                errors=[FieldError(_field_path(path) or "(document)", "YAML aliases (*name) are not allowed")],
            )
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            children = [(v, f"{path}.{k.value}" if path else str(k.value)) for k, v in node.value]
        elif isinstance(node, yaml.SequenceNode):
            children = [(v, f"{path}[{i}]") for i, v in enumerate(node.value)]
        else:
            continue
        # Reversed, so nodes are visited in document order and the alias (not its anchor) is the one reported.
        stack.extend(reversed(children))


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict = {}
    parent = loader.paths.get(node, "")
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if not isinstance(key, Hashable):
            raise DocumentInvalid(
                "document is not valid YAML",
                errors=[
                    FieldError(
                        _field_path(parent) or "(document)",
                        f"keys must be plain names, not a list or mapping (line {key_node.start_mark.line + 1})",
                    )
                ],
            )
        path = f"{parent}.{key}" if parent else str(key)
        if key in seen:
            mark = key_node.start_mark
            raise DocumentInvalid(
                "document is not valid YAML",
                errors=[FieldError(_field_path(path), f"duplicate key at line {mark.line + 1}")],
            )
        loader.paths[value_node] = path
        seen[key] = loader.construct_object(value_node, deep=deep)
    return seen


def _field_path(path: str) -> str:
    """Paths inside the document root read like schema paths (`temperature.strict`)."""
    return path.removeprefix(f"{ROOT}.")


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def check_size(size: int) -> None:
    """Refuse a document over TEMPLATE_MAX_BYTES, whether it came as text or as a JSON object."""
    limit = settings.TEMPLATE_MAX_BYTES
    if size > limit:
        raise DocumentInvalid(
            "document too large",
            errors=[FieldError("(document)", f"must be at most {limit} bytes, got {size}")],
        )


def encoded_size(document: Any) -> int:
    """Bytes of the document as compact JSON, the measure for documents that arrive already parsed."""
    return len(json.dumps(document, ensure_ascii=False, separators=(",", ":"), default=str).encode("utf-8"))


def parse(text: str | bytes, fmt: str) -> Any:
    """Parse a document, refusing oversize input and naming the line of a syntax error."""
    if fmt not in FORMATS:
        raise DocumentInvalid("unknown format", errors=[FieldError("format", f"must be one of {', '.join(FORMATS)}")])
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise DocumentInvalid(
                "document is not UTF-8", errors=[FieldError("(document)", "must be UTF-8 text")]
            ) from None
    check_size(len(text.encode("utf-8")))
    if fmt == "json":
        duplicates: dict[int, tuple[dict, str]] = {}
        try:
            document = json.loads(text, object_pairs_hook=lambda pairs: _json_object(pairs, duplicates))
        except json.JSONDecodeError as exc:
            raise DocumentInvalid(
                "document is not valid JSON",
                errors=[FieldError("(document)", f"invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}")],
            ) from None
        except RecursionError:
            raise DocumentInvalid("document is not valid JSON", errors=[_TOO_DEEP]) from None
        if duplicates:
            path, key = _json_duplicate(document, duplicates, "")
            raise DocumentInvalid(
                "document is not valid JSON", errors=[FieldError(_field_path(path), f"duplicate key {key!r}")]
            )
        return document
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
    except RecursionError:
        raise DocumentInvalid("document is not valid YAML", errors=[_TOO_DEEP]) from None


def _json_object(pairs: list[tuple[str, Any]], duplicates: dict[int, tuple[dict, str]]) -> dict:
    """Build one object, noting its first repeated key; objects are built inside out, so paths come later."""
    obj: dict = {}
    for key, value in pairs:
        if key in obj:
            # Holding `obj` keeps its id from being reused by a later object.
            duplicates.setdefault(id(obj), (obj, key))
        obj[key] = value
    return obj


def _json_duplicate(value: Any, duplicates: dict[int, tuple[dict, str]], path: str) -> tuple[str, str] | None:
    """Dotted path of the first object (in document order) that repeated a key, and that key."""
    if isinstance(value, dict):
        if id(value) in duplicates:
            key = duplicates[id(value)][1]
            return (f"{path}.{key}" if path else key), key
        children = ((f"{path}.{k}" if path else k, v) for k, v in value.items())
    elif isinstance(value, list):
        children = ((f"{path}[{i}]", v) for i, v in enumerate(value))
    else:
        return None
    for child_path, child in children:
        found = _json_duplicate(child, duplicates, child_path)
        if found:
            return found
    return None


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
    if isinstance(value, float):
        text = repr(value)
        # YAML 1.1 (PyYAML) reads `1e-05` as a string; `1.0e-05` is a float, as PyYAML itself writes it.
        return text.replace("e", ".0e", 1) if "e" in text and "." not in text else text
    if isinstance(value, int):
        return repr(value)
    # JSON string syntax is YAML's double-quoted scalar, escapes included.
    return json.dumps(value, ensure_ascii=False)
