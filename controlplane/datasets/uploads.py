"""Parsing and validating an uploaded intent dataset (CSV or JSON Lines) into canonical, deduplicated rows.

Rows are numbered as lines of the file (a CSV header is row 1), so `row 7` is where an editor shows it.
"""

import csv
import hashlib
import io
import json
import unicodedata
from collections import Counter
from dataclasses import dataclass

from controlplane.datasets.exceptions import DatasetInvalid, RowError
from controlplane.params.schema import INTENT_LABELS

MAX_BYTES = 20 * 1024 * 1024
MAX_ROWS = 200_000
MAX_TEXT_CHARS = 2000
MAX_TAG_CHARS = 200
# Fewer examples of a label than this and its held-out share (20%) is too small to measure anything.
MIN_EXAMPLES_PER_LABEL = 20
MAX_REPORTED_ERRORS = 50
FORMATS = ("csv", "jsonl")
REQUIRED_FIELDS = ("text", "label")
OPTIONAL_FIELDS = ("lang", "template")


@dataclass(frozen=True)
class ParsedDataset:
    """Valid rows as (text, label, lang, template), in file order, with what deduplication removed."""

    rows: list[tuple[str, str, str, str]]
    duplicates_removed: int
    label_counts: dict[str, int]
    has_templates: bool
    rows_json: str
    sha256: str


def normalised(text: str) -> str:
    """What counts as the same message: NFKC, case-folded, whitespace collapsed (the classifier sees no more)."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def parse_upload(content: bytes | str, fmt: str) -> ParsedDataset:
    """Every row valid, or DatasetInvalid naming each bad row and field (the first 50, then a count)."""
    errors = _Errors()
    if fmt not in FORMATS:
        errors.file("format", f"must be one of {', '.join(FORMATS)}, got {fmt!r}")
        errors.raise_if_any()
    data = content.encode("utf-8") if isinstance(content, str) else content
    if len(data) > MAX_BYTES:
        errors.file("content", f"{len(data)} bytes is over the limit of {MAX_BYTES} bytes (20 MiB)")
        errors.raise_if_any()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        errors.file("content", f"not UTF-8 text (invalid byte at offset {exc.start})")
        errors.raise_if_any()
    records = _csv_records(text, errors) if fmt == "csv" else _jsonl_records(text, errors)
    rows, duplicates = _validated_rows(records, errors)
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


class _Errors:
    """Collects problems: file-level ones first, then rows; keeps the first few and counts the rest."""

    def __init__(self):
        self.file_errors: list[RowError] = []
        self.row_errors: list[RowError] = []
        self.row_count = 0

    @property
    def any(self) -> bool:
        return bool(self.file_errors or self.row_count)

    def file(self, field: str, message: str) -> None:
        self.file_errors.append(RowError(None, field, message))

    def row(self, row: int, field: str, message: str) -> None:
        self.row_count += 1
        if len(self.row_errors) < MAX_REPORTED_ERRORS:
            self.row_errors.append(RowError(row, field, message))

    def raise_if_any(self) -> None:
        if not self.any:
            return
        shown = (self.file_errors + self.row_errors)[:MAX_REPORTED_ERRORS]
        total = len(self.file_errors) + self.row_count
        raise DatasetInvalid(shown, more=total - len(shown))


def _csv_records(text: str, errors: _Errors):
    """(row, {field: value}) per CSV record; the header must name text and label (lang, template optional)."""
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    try:
        header = next(reader, None)
    except csv.Error as exc:
        errors.file("header", f"not valid CSV ({exc})")
        return
    if header is None:
        return
    columns = [name.strip().lower() for name in header]
    for name in columns:
        if name not in REQUIRED_FIELDS + OPTIONAL_FIELDS:
            errors.file("header", f"unknown column {name!r}; expected text,label (optionally lang, template)")
    for name in REQUIRED_FIELDS:
        if name not in columns:
            errors.file("header", f"missing column {name!r}; the first line must be text,label")
    for name in set(columns):
        if columns.count(name) > 1:
            errors.file("header", f"column {name!r} appears twice")
    if errors.file_errors:
        return
    line = reader.line_num
    while True:
        start = line + 1
        try:
            values = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            errors.row(start, "csv", f"not valid CSV ({exc}); reading stopped here")
            return
        line = reader.line_num
        if not values:
            continue
        if len(values) != len(columns):
            errors.row(start, "columns", f"expected {len(columns)} fields ({','.join(columns)}), got {len(values)}")
            continue
        yield start, dict(zip(columns, values, strict=True))


def _jsonl_records(text: str, errors: _Errors):
    """(row, {field: value}) per non-blank line, each a JSON object with text and label (lang, template optional)."""
    # Split on newlines only: JSON strings may hold U+2028 and other characters str.splitlines() breaks at.
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as exc:
            errors.row(number, "json", f"not valid JSON ({exc.msg} at column {exc.colno})")
            continue
        if not isinstance(record, dict):
            errors.row(number, "json", 'expected an object like {"text": ..., "label": ...}')
            continue
        unknown = [key for key in record if key not in REQUIRED_FIELDS + OPTIONAL_FIELDS]
        for key in unknown:
            errors.row(number, str(key)[:50], "unknown field; expected text, label (optionally lang, template)")
        if not unknown:
            yield number, record


def _validated_rows(records, errors: _Errors) -> tuple[list[tuple[str, str, str, str]], int]:
    rows: list[tuple[str, str, str, str]] = []
    first_seen: dict[str, tuple[int, str]] = {}
    duplicates = 0
    count = 0
    for number, record in records:
        count += 1
        if count > MAX_ROWS:
            errors.file("content", f"more than {MAX_ROWS} rows")
            break
        text = _text_field(number, record, "text", errors, required=True, limit=MAX_TEXT_CHARS)
        label = _label_field(number, record, errors)
        lang = _text_field(number, record, "lang", errors, required=False, limit=MAX_TAG_CHARS)
        template = _text_field(number, record, "template", errors, required=False, limit=MAX_TAG_CHARS)
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


def _text_field(number: int, record: dict, name: str, errors: _Errors, *, required: bool, limit: int) -> str | None:
    value = record.get(name)
    if value is None or (not required and value == ""):
        if required:
            errors.row(number, name, "required")
            return None
        return ""
    if not isinstance(value, str):
        errors.row(number, name, f"must be a string, got {type(value).__name__}")
        return None
    value = value.strip()
    if not value:
        if not required:
            return ""
        errors.row(number, name, "must not be empty")
        return None
    if len(value) > limit:
        errors.row(number, name, f"{len(value)} characters is longer than the limit of {limit}")
        return None
    return value


def _label_field(number: int, record: dict, errors: _Errors) -> str | None:
    value = record.get("label")
    if value is None or value == "":
        errors.row(number, "label", "required")
        return None
    if not isinstance(value, str) or value.strip() not in INTENT_LABELS:
        errors.row(number, "label", f"unknown label {str(value)[:50]!r}; expected one of {', '.join(INTENT_LABELS)}")
        return None
    return value.strip()
