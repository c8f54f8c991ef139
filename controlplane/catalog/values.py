"""What a catalog entry's values may look like: names, local paths, Hugging Face repo ids and revisions.

Every value here may end up on an engine's command line, so each passes the agent's own rule
(`engine_node.engine_flags.check_value`: no leading `-`, no control characters) besides its own shape.
"""

import re

from controlplane.lib.errors import InvalidField
from engine_node.engine_flags import FlagRefused, check_value

NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
NAME_RULE = "must be 1-64 lowercase letters, digits, '.', '_' or '-', starting with a letter or digit"
# An absolute path whose every segment starts with a letter, digit or '_': no '.', '..' or hidden segments.
LOCAL_PATH = re.compile(r"(/[A-Za-z0-9_][A-Za-z0-9._+@=-]{0,127}){1,32}/?")
# Hugging Face repo ids: `name` or `org/name`.
REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}(/[A-Za-z0-9][A-Za-z0-9._-]{0,95})?")
SOURCE_RULE = (
    "must be an absolute path on the nodes (/srv/models/qwen3-8b; no '.' or '..' segments) "
    "or a Hugging Face repo id (Qwen/Qwen3-8B)"
)
# A branch, a tag or a commit id.
REVISION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,127}")
REVISION_RULE = "must be a branch, tag or commit id: letters, digits, '.', '_', '/' or '-', at most 128"


def check_name(field: str, value) -> str:
    if not isinstance(value, str) or not NAME.fullmatch(value):
        raise InvalidField(field, NAME_RULE)
    return value


def check_source(field: str, value, *, required: bool = True) -> str:
    """A model or tokenizer location; blank is allowed where `required` is False."""
    value = _text(field, value)
    if not value and not required:
        return ""
    _engine_rule(field, value)
    if not (LOCAL_PATH.fullmatch(value) or REPO_ID.fullmatch(value)):
        raise InvalidField(field, SOURCE_RULE)
    return value


def check_revision(field: str, value) -> str:
    value = _text(field, value)
    if not value:
        return ""
    _engine_rule(field, value)
    if not REVISION.fullmatch(value) or ".." in value:
        raise InvalidField(field, REVISION_RULE)
    return value


def is_local_path(source: str) -> bool:
    return source.startswith("/")


def _text(field: str, value) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InvalidField(field, "must be a string")
    return value.strip()


def _engine_rule(field: str, value: str) -> None:
    try:
        check_value(field, value)
    except FlagRefused as exc:
        raise InvalidField(field, exc.message) from None
