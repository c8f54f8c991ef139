"""A run's request rows as CSV or JSON Lines, streamed in chunks so an export of 200,000 rows holds none in memory."""

import csv
import io
import json
from collections.abc import Iterator

from controlplane.replays.serializers import REQUEST_FIELDS

CHUNK_ROWS = 2000
# Text a spreadsheet would run as a formula (a conversation id or an error starting with `=`, say) is quoted.
FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")


def _cell(value):
    if value is None:
        return ""
    if isinstance(value, str) and value[:1] in FORMULA_PREFIXES:
        return "'" + value
    return value


def _rows(queryset) -> Iterator[tuple]:
    yield from queryset.values_list(*REQUEST_FIELDS).iterator(chunk_size=CHUNK_ROWS)


def csv_chunks(queryset) -> Iterator[str]:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(REQUEST_FIELDS)
    for count, row in enumerate(_rows(queryset), 1):
        writer.writerow([_cell(value) for value in row])
        if count % 500 == 0:
            yield buffer.getvalue()
            buffer.seek(0)
            buffer.truncate()
    yield buffer.getvalue()


def jsonl_chunks(queryset) -> Iterator[str]:
    lines = []
    for row in _rows(queryset):
        lines.append(json.dumps(dict(zip(REQUEST_FIELDS, row, strict=True)), ensure_ascii=False))
        if len(lines) == 500:
            yield "\n".join(lines) + "\n"
            lines = []
    if lines:
        yield "\n".join(lines) + "\n"
