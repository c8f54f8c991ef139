"""Reads of the audit log: filtered queries and CSV rows."""

import csv
import io
import json
from collections.abc import Iterator

from django.db.models import QuerySet

from controlplane.audit.filters import AuditFilter
from controlplane.audit.models import AuditEntry
from controlplane.lib.errors import InvalidField

_FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")
CSV_COLUMNS = ["at", "actor", "request_id", "action", "target_type", "target_id", "target", "reason", "before", "after"]


def audit_entries(*, params) -> QuerySet[AuditEntry]:
    """Entries matching the query parameters; a malformed filter is a 400 naming it."""
    filterset = AuditFilter(params, queryset=AuditEntry.objects.all())
    if not filterset.is_valid():
        field, messages = next(iter(filterset.errors.items()))
        raise InvalidField(field, "; ".join(messages))
    return filterset.qs


def audit_csv_rows(entries: QuerySet[AuditEntry]) -> Iterator[str]:
    buffer = io.StringIO()
    writer = csv.writer(buffer)

    def flush() -> str:
        value = buffer.getvalue()
        buffer.seek(0)
        buffer.truncate(0)
        return value

    writer.writerow(CSV_COLUMNS)
    yield flush()
    for entry in entries.iterator(chunk_size=1000):
        writer.writerow(
            _cell(value)
            for value in [
                entry.at.isoformat(),
                entry.actor_name,
                entry.request_id,
                entry.action,
                entry.target_type,
                entry.target_id,
                entry.target_repr,
                entry.reason,
                json.dumps(entry.before, ensure_ascii=False, sort_keys=True),
                json.dumps(entry.after, ensure_ascii=False, sort_keys=True),
            ]
        )
        yield flush()


def _cell(value: str) -> str:
    """Neutralise text a spreadsheet would run as a formula (a reason starting with `=`, say)."""
    return "'" + value if value[:1] in _FORMULA_PREFIXES else value
