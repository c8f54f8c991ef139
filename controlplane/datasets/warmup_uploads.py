"""Parsing an uploaded warmup message file (CSV or JSON Lines) into canonical, deduplicated warmup messages.

A warmup message is `{"text", "intent"?, "business_tag"?, "count"?}`: what an engine node will replay after a
cold start (the seed's cold-start plan: "historical high-frequency queries" at 5 % of capacity).
"""

import hashlib
import json
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass

from controlplane.datasets.models import WarmupDatasetVersion
from controlplane.datasets.rows import MAX_BYTES, RecordShape, UploadErrors, decoded_text, records, text_field
from controlplane.params.schema import INTENT_LABELS

MAX_ROWS = 50_000
MAX_TEXT_CHARS = 4000
# The gateway's rule for a business tag (X-Business-Tag), so every tag here is one a request may carry.
BUSINESS_TAG = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}")
BUSINESS_TAG_RULE = "must be 1-64 letters, digits or _.:- starting with a letter or digit"
SHAPE = RecordShape(required=("text",), optional=("intent", "business_tag"))
NO_INTENT = "none"


@dataclass(frozen=True)
class WarmupContent:
    """Valid warmup messages in canonical form, with what reading them found."""

    source: str
    source_format: str
    messages: list[dict]
    duplicates_removed: int
    intent_counts: dict[str, int]
    messages_json: str  # canonical: compact JSON, keys sorted, absent fields left out
    sha256: str  # of messages_json exactly
    derived_from: dict | None = None  # what a conversation log held (see conversation_logs.py)


def query_key(text: str) -> str:
    """What counts as the same query: NFKC, lower case, whitespace collapsed, trailing punctuation dropped.

    "Where is my order?" and "where is my order" are one question to a warmup (and to the prefix cache it fills).
    """
    collapsed = " ".join(unicodedata.normalize("NFKC", text).lower().split())
    end = len(collapsed)
    while end and (unicodedata.category(collapsed[end - 1])[0] == "P" or collapsed[end - 1] in " ~"):
        end -= 1
    return collapsed[:end]


def warmup_content(
    *, source: str, source_format: str, messages: list[dict], duplicates_removed: int = 0, derived_from=None
) -> WarmupContent:
    """Canonical JSON, its sha256 and the per-intent counts of valid messages."""
    counts = Counter(message.get("intent", NO_INTENT) for message in messages)
    messages_json = json.dumps(messages, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    return WarmupContent(
        source=source,
        source_format=source_format,
        messages=messages,
        duplicates_removed=duplicates_removed,
        intent_counts={label: counts[label] for label in (*INTENT_LABELS, NO_INTENT)},
        messages_json=messages_json,
        sha256=hashlib.sha256(messages_json.encode("utf-8")).hexdigest(),
        derived_from=derived_from,
    )


def parse_warmup_upload(content: bytes | str, fmt: str) -> WarmupContent:
    """Every row valid, or DatasetInvalid naming each bad row and field (the first 50, then a count)."""
    errors = UploadErrors()
    text = decoded_text(content, fmt, errors, max_bytes=MAX_BYTES)
    messages: list[dict] = []
    first_seen: dict[str, tuple[int, dict]] = {}
    duplicates = 0
    for count, (number, record) in enumerate(records(text, fmt, errors, SHAPE), start=1):
        if count > MAX_ROWS:
            errors.file("content", f"more than {MAX_ROWS} rows")
            break
        message = _message(number, record, errors)
        if message is None:
            continue
        key = query_key(message["text"])
        if not key:
            errors.row(number, "text", "holds nothing but punctuation")
            continue
        seen = first_seen.get(key)
        if seen is None:
            first_seen[key] = (number, message)
            messages.append(message)
            continue
        conflicts = [name for name in ("intent", "business_tag") if message.get(name) != seen[1].get(name)]
        for name in conflicts:
            errors.row(
                number,
                name,
                f"{message.get(name, '')!r}, but the same text on row {seen[0]} has {seen[1].get(name, '')!r}",
            )
        if not conflicts:
            duplicates += 1
    if not messages and not errors.any:
        errors.file("content", "no rows")
    errors.raise_if_any()
    return warmup_content(
        source=WarmupDatasetVersion.Source.UPLOAD, source_format=fmt, messages=messages, duplicates_removed=duplicates
    )


def _message(number: int, record: dict, errors: UploadErrors) -> dict | None:
    text = text_field(number, record, "text", errors, required=True, limit=MAX_TEXT_CHARS)
    intent = text_field(number, record, "intent", errors, required=False, limit=1000)
    tag = text_field(number, record, "business_tag", errors, required=False, limit=1000)
    valid = text is not None and intent is not None and tag is not None
    if intent and intent not in INTENT_LABELS:
        errors.row(number, "intent", f"unknown intent {intent[:50]!r}; expected one of {', '.join(INTENT_LABELS)}")
        valid = False
    if tag and not BUSINESS_TAG.fullmatch(tag):
        errors.row(number, "business_tag", f"{BUSINESS_TAG_RULE}, got {tag[:70]!r}")
        valid = False
    if not valid:
        return None
    message = {"text": text}
    if intent:
        message["intent"] = intent
    if tag:
        message["business_tag"] = tag
    return message
