"""Reading uploaded rows (CSV with a header, or JSON Lines) and collecting their problems, for every kind of upload.

Rows are numbered as lines of the file (a CSV header is row 1), so `row 7` is where an editor shows it.
"""

import csv
import io
import json
import math
import re
import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from controlplane.datasets.exceptions import DatasetInvalid, RowError

MAX_BYTES = 20 * 1024 * 1024
MAX_REPORTED_ERRORS = 50
# No upload's fields nest deeper than a few levels (a conversation's message parts); no count or time needs 30 digits.
MAX_JSON_DEPTH = 32
MAX_NUMBER_DIGITS = 30
_NUMBER_LIMIT = 10**MAX_NUMBER_DIGITS
_LONG_NUMBER = re.compile(rf"\d{{{MAX_NUMBER_DIGITS},}}|[eE][+-]?\d{{3,}}")
FORMATS = ("csv", "jsonl")


@dataclass(frozen=True)
class RecordShape:
    """The fields one kind of upload knows: the required ones, the optional ones, and how to describe them."""

    required: tuple[str, ...]
    optional: tuple[str, ...] = ()

    @property
    def fields(self) -> tuple[str, ...]:
        return self.required + self.optional

    @property
    def header(self) -> str:
        """`text,label`: what the first line of a CSV file must at least name."""
        return ",".join(self.required)

    def described(self, separator: str) -> str:
        """`text, label (optionally lang, template)`."""
        optional = f" (optionally {', '.join(self.optional)})" if self.optional else ""
        return separator.join(self.required) + optional

    @property
    def example(self) -> str:
        """`{"text": ..., "label": ...}`: a JSON Lines object of this shape."""
        return "{" + ", ".join(f'"{name}": ...' for name in self.required) + "}"


class UploadErrors:
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


def normalised(text: str) -> str:
    """What counts as the same message: NFKC, case-folded, whitespace collapsed (the classifier sees no more)."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def decoded_text(content: bytes | str, fmt: str, errors: UploadErrors, *, max_bytes: int = MAX_BYTES) -> str:
    """The upload as text, or DatasetInvalid for an unknown format, an oversized file or bytes that are not UTF-8."""
    if fmt not in FORMATS:
        errors.file("format", f"must be one of {', '.join(FORMATS)}, got {fmt!r}")
        errors.raise_if_any()
    data = content.encode("utf-8") if isinstance(content, str) else content
    if len(data) > max_bytes:
        mib = f" ({max_bytes >> 20} MiB)" if max_bytes % (1 << 20) == 0 else ""
        errors.file("content", f"{len(data)} bytes is over the limit of {max_bytes} bytes{mib}")
        errors.raise_if_any()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        errors.file("content", f"not UTF-8 text (invalid byte at offset {exc.start})")
        errors.raise_if_any()
        raise AssertionError("unreachable") from exc


def records(text: str, fmt: str, errors: UploadErrors, shape: RecordShape) -> Iterator[tuple[int, dict]]:
    """(row, {field: value}) per record of a CSV or JSON Lines file of `shape`."""
    return csv_records(text, errors, shape) if fmt == "csv" else jsonl_records(text, errors, shape)


def csv_records(text: str | Iterable[str], errors: UploadErrors, shape: RecordShape) -> Iterator[tuple[int, dict]]:
    """(row, {field: value}) per CSV record; the header must name every required column and nothing unknown.

    `text` is the whole file, or its lines (each with its line break) as a file opened with newline="" gives them.
    """
    lines = io.StringIO(text, newline="") if isinstance(text, str) else text
    reader = csv.reader(lines, strict=True)
    try:
        header = next(reader, None)
    except csv.Error as exc:
        errors.file("header", f"not valid CSV ({exc})")
        return
    if header is None:
        return
    columns = [name.strip().lower() for name in header]
    for name in columns:
        if name not in shape.fields:
            errors.file("header", f"unknown column {name!r}; expected {shape.described(',')}")
    for name in shape.required:
        if name not in columns:
            errors.file("header", f"missing column {name!r}; the first line must be {shape.header}")
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


def jsonl_objects(text: str | Iterable[str], errors: UploadErrors, example: str) -> Iterator[tuple[int, dict]]:
    """(row, object) per non-blank line that is a JSON object; other lines are errors naming `example`.

    `text` is the whole file, or its lines in order (a streaming reader's, split on newlines only).
    """
    # Split on newlines only: JSON strings may hold U+2028 and other characters str.splitlines() breaks at.
    lines = text.split("\n") if isinstance(text, str) else text
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        problem = ""
        try:
            record = json.loads(line, parse_constant=_no_constant)
        except json.JSONDecodeError as exc:
            problem = f"not valid JSON ({exc.msg} at column {exc.colno})"
        except RecursionError:
            problem = f"nested deeper than {MAX_JSON_DEPTH} levels"
        except _NotJSON as exc:
            problem = str(exc)
        except ValueError:  # the only other: an integer past Python's limit of 4,300 digits
            problem = f"a number of more than {MAX_NUMBER_DIGITS} digits"
        else:
            problem = _hostile(line, record)
        if problem:
            errors.row(number, "json", problem)
            continue
        if not isinstance(record, dict):
            errors.row(number, "json", f"expected an object like {example}")
            continue
        yield number, record


class _NotJSON(ValueError):
    """What Python's json reads but JSON is not."""


def _no_constant(name: str):
    raise _NotJSON(f"{name} is not a JSON number")


def _hostile(line: str, record) -> str:
    """Why a parsed line is refused though it parsed: nested past MAX_JSON_DEPTH (later code would recurse on it),
    or a number past MAX_NUMBER_DIGITS or outside a float's range. "" when it is fine. Lines with few brackets and
    short numbers, nearly all of them, are passed on what `str` methods find, without walking the value."""
    if line.count("{") + line.count("[") > MAX_JSON_DEPTH or _LONG_NUMBER.search(line):
        stack = [(record, 1)]
        while stack:
            value, depth = stack.pop()
            if isinstance(value, dict | list):
                if depth > MAX_JSON_DEPTH:
                    return f"nested deeper than {MAX_JSON_DEPTH} levels"
                items = value.values() if isinstance(value, dict) else value
                stack.extend((item, depth + 1) for item in items)
            elif isinstance(value, int) and not isinstance(value, bool) and abs(value) >= _NUMBER_LIMIT:
                return f"a number of more than {MAX_NUMBER_DIGITS} digits"
            elif isinstance(value, float) and not math.isfinite(value):
                return "a number too large for a float"
    return ""


def jsonl_records(text: str, errors: UploadErrors, shape: RecordShape) -> Iterator[tuple[int, dict]]:
    """(row, object) per JSON Lines object of `shape`; a field the shape does not know refuses its row."""
    for number, record in jsonl_objects(text, errors, shape.example):
        unknown = [key for key in record if key not in shape.fields]
        for key in unknown:
            errors.row(number, str(key)[:50], f"unknown field; expected {shape.described(', ')}")
        if not unknown:
            yield number, record


def text_field(number: int, record: dict, name: str, errors: UploadErrors, *, required: bool, limit: int) -> str | None:
    """The stripped string value of `name`: "" when optional and absent, None (with an error) when invalid."""
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
