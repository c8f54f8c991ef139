"""Parsing and validating an uploaded intent dataset (CSV or JSON Lines) into canonical, deduplicated rows.

Rows are numbered as lines of the file (a CSV header is row 1), so `row 7` is where an editor shows it.
"""

import hashlib
import json
from collections import Counter
from dataclasses import dataclass

from controlplane.datasets.rows import (
    FORMATS,
    MAX_BYTES,
    RecordShape,
    UploadErrors,
    decoded_text,
    normalised,
    records,
    text_field,
)
from controlplane.params.schema import INTENT_LABELS

MAX_ROWS = 200_000
MAX_TEXT_CHARS = 2000
MAX_TAG_CHARS = 200
# Fewer examples of a label than this and its held-out share (20%) is too small to measure anything.
MIN_EXAMPLES_PER_LABEL = 20
SHAPE = RecordShape(required=("text", "label"), optional=("lang", "template"))
# FORMATS and MAX_BYTES are part of this module's interface (the API and forms name them).
__all__ = ["FORMATS", "MAX_BYTES", "ParsedDataset", "normalised", "parse_upload"]


@dataclass(frozen=True)
class ParsedDataset:
    """Valid rows as (text, label, lang, template), in file order, with what deduplication removed."""

    rows: list[tuple[str, str, str, str]]
    duplicates_removed: int
    label_counts: dict[str, int]
    has_templates: bool
    rows_json: str
    sha256: str


def parse_upload(content: bytes | str, fmt: str) -> ParsedDataset:
    """Every row valid, or DatasetInvalid naming each bad row and field (the first 50, then a count)."""
    errors = UploadErrors()
    text = decoded_text(content, fmt, errors, max_bytes=MAX_BYTES)
    rows, duplicates = _validated_rows(records(text, fmt, errors, SHAPE), errors)
    counts = Counter(label for _, label, _, _ in rows)
    if not rows and not errors.any:
        errors.file("content", "no rows")
    short = [f"{label} has {counts[label]}" for label in INTENT_LABELS if counts[label] < MIN_EXAMPLES_PER_LABEL]
    if rows and short:
        errors.file(
            "label",
            f"too few examples to train (need at least {MIN_EXAMPLES_PER_LABEL} of each label): " + ", ".join(short),
        )
    errors.raise_if_any()
    rows_json = json.dumps([list(row) for row in rows], ensure_ascii=False, separators=(",", ":"))
    return ParsedDataset(
        rows=rows,
        duplicates_removed=duplicates,
        label_counts={label: counts[label] for label in INTENT_LABELS},
        has_templates=all(template for _, _, _, template in rows),
        rows_json=rows_json,
        sha256=hashlib.sha256(rows_json.encode("utf-8")).hexdigest(),
    )


def _validated_rows(found, errors: UploadErrors) -> tuple[list[tuple[str, str, str, str]], int]:
    rows: list[tuple[str, str, str, str]] = []
    first_seen: dict[str, tuple[int, str]] = {}
    duplicates = 0
    count = 0
    for number, record in found:
        count += 1
        if count > MAX_ROWS:
            errors.file("content", f"more than {MAX_ROWS} rows")
            break
        text = text_field(number, record, "text", errors, required=True, limit=MAX_TEXT_CHARS)
        label = _label_field(number, record, errors)
        lang = text_field(number, record, "lang", errors, required=False, limit=MAX_TAG_CHARS)
        template = text_field(number, record, "template", errors, required=False, limit=MAX_TAG_CHARS)
        if text is None or label is None or lang is None or template is None:
            continue
        key = normalised(text)
        seen = first_seen.get(key)
        if seen is None:
            first_seen[key] = (number, label)
            rows.append((text, label, lang, template))
        elif seen[1] != label:
            errors.row(number, "label", f"{label!r}, but the same text on row {seen[0]} is labelled {seen[1]!r}")
        else:
            duplicates += 1
    return rows, duplicates


def _label_field(number: int, record: dict, errors: UploadErrors) -> str | None:
    value = record.get("label")
    if value is None or value == "":
        errors.row(number, "label", "required")
        return None
    if not isinstance(value, str) or value.strip() not in INTENT_LABELS:
        errors.row(number, "label", f"unknown label {str(value)[:50]!r}; expected one of {', '.join(INTENT_LABELS)}")
        return None
    return value.strip()
