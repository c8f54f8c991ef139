"""Reads of impact records: the filtered list, one record, and the history of one parameter field."""

from datetime import UTC, datetime

from django.db.models import Prefetch, QuerySet
from django.utils.dateparse import parse_datetime
from django.utils.timezone import is_naive, make_aware

from controlplane.impact.models import ImpactFieldChange, ImpactRecord
from controlplane.lib.errors import InvalidField
from controlplane.params import schema

FIELD_PATHS = frozenset(spec.path for spec in schema.FIELDS)
CATALOG_SUFFIX = " (catalog entry)"


def field_path_check(path: str) -> str:
    """`path` if it names a parameter field (or a model reference's catalog entry); InvalidField("field") if not."""
    bare = path.removesuffix(CATALOG_SUFFIX)
    if bare not in FIELD_PATHS or (path != bare and bare not in schema.MODEL_REFERENCE_FIELDS):
        raise InvalidField("field", f"no parameter field named {path[:200]!r} (dotted path, e.g. batch.max_size)")
    return path


def _choice(name: str, value: str, choices) -> str:
    if value not in choices.values:
        raise InvalidField(name, f"must be one of {', '.join(choices.values)}, got {value[:60]!r}")
    return value


def _time(name: str, value: str) -> datetime:
    """ISO 8601 in UTC (Postgres refuses offsets past 15:59 that Python accepts, as controlplane/lib/filters.py)."""
    try:
        parsed = parse_datetime(value)
    except ValueError:
        parsed = None
    if parsed is None:
        raise InvalidField(name, f"expected an ISO 8601 date and time, got {value[:60]!r}")
    try:
        return make_aware(parsed, UTC) if is_naive(parsed) else parsed.astimezone(UTC)
    except OverflowError:
        raise InvalidField(name, "is out of range") from None


def impact_records(
    *,
    field: str = "",
    pool: str = "",
    template: str = "",
    kind: str = "",
    outcome: str = "",
    status: str = "",
    since: str = "",
    until: str = "",
) -> QuerySet[ImpactRecord]:
    """Records newest first, narrowed by each filter given; a filter value that cannot match is a 400 naming it."""
    records = ImpactRecord.objects.select_related(
        "template", "version_before__template", "version_after__template"
    ).prefetch_related(Prefetch("field_changes", queryset=ImpactFieldChange.objects.order_by("id")))
    if field:
        records = records.filter(field_changes__path=field_path_check(field)).distinct()
    if pool:
        records = records.filter(pool_name=pool)
    if template:
        records = records.filter(template__name=template)
    if kind:
        records = records.filter(kind=_choice("kind", kind, ImpactRecord.Kind))
    if outcome:
        records = records.filter(outcome=_choice("outcome", outcome, ImpactRecord.Outcome))
    if status:
        records = records.filter(status=_choice("status", status, ImpactRecord.Status))
    if since:
        records = records.filter(changed_at__gte=_time("since", since))
    if until:
        records = records.filter(changed_at__lte=_time("until", until))
    return records.order_by("-changed_at", "-id")


def field_history(*, path: str) -> list[ImpactFieldChange]:
    """Every change of one field, oldest first, with its record."""
    field_path_check(path)
    return list(
        ImpactFieldChange.objects.filter(path=path)
        .select_related("record", "record__version_before__template", "record__version_after__template")
        .order_by("record__changed_at", "record_id")
    )
