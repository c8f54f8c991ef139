"""API shapes of metric history: the query of the history endpoint."""

import re
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from rest_framework import serializers

from controlplane.lib.serializers import StrictSerializer
from controlplane.metrics.samples import COUNT_MAPS, SAMPLE_KEYS

DEFAULT_RANGE_S = 300
MAX_METRICS = 32
# Keys of aggregate and minute rows besides the sample's own.
DERIVED_KEYS = frozenset({"nodes", "samples"})
_BUCKET = re.compile(r"[\w.:-]{1,64}")


def metric_name_valid(metric: str) -> bool:
    """A sample key, `nodes`/`samples`, or `<count map>.<bucket>` (e.g. `length_hist.gt2k`)."""
    head, dot, bucket = metric.partition(".")
    if dot:
        return head in COUNT_MAPS and bool(_BUCKET.fullmatch(bucket))
    return metric in SAMPLE_KEYS or metric in DERIVED_KEYS


def parse_time(value: str) -> datetime:
    """Unix seconds or ISO 8601 (naive means UTC)."""
    try:
        return datetime.fromtimestamp(float(value), tz=UTC)
    except (ValueError, OverflowError, OSError):
        pass
    try:
        parsed = parse_datetime(value)
    except ValueError:  # well formed, but no such time (month 13)
        parsed = None
    if parsed is None:
        raise serializers.ValidationError("expected unix seconds or an ISO 8601 time")
    try:
        # In UTC: Postgres refuses offsets past 15:59 that Python accepts (`-21:09`).
        return parsed.astimezone(UTC) if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    except OverflowError:
        raise serializers.ValidationError("out of range") from None


class MetricHistorySerializer(serializers.Serializer):
    scope = serializers.CharField()
    name = serializers.CharField()
    resolution_s = serializers.IntegerField(help_text="1 for ranges up to an hour, 60 beyond")
    since = serializers.FloatField(help_text="unix seconds")
    until = serializers.FloatField(help_text="unix seconds")
    t = serializers.ListField(child=serializers.FloatField(), help_text="unix seconds of each row")
    values = serializers.DictField(
        child=serializers.ListField(child=serializers.JSONField(allow_null=True)),
        help_text="one list per figure, aligned with `t`: numbers, null where a row has none, objects for a "
        "count map's entries",
    )


class HistoryQuerySerializer(StrictSerializer):
    metric = serializers.CharField(help_text="comma-separated figures, e.g. latency_p99_s,qps,length_hist")
    since = serializers.CharField(required=False, help_text="unix seconds or ISO 8601; default: 5 minutes before until")
    until = serializers.CharField(required=False, help_text="unix seconds or ISO 8601; default: now")

    def validate_metric(self, value: str) -> list[str]:
        metrics = [m.strip() for m in value.split(",") if m.strip()]
        if not metrics:
            raise serializers.ValidationError("name at least one figure")
        if len(metrics) > MAX_METRICS:
            raise serializers.ValidationError(f"at most {MAX_METRICS} figures")
        unknown = [m for m in metrics if not metric_name_valid(m)]
        if unknown:
            raise serializers.ValidationError(f"unknown figure {unknown[0]!r}")
        return list(dict.fromkeys(metrics))

    def validate_since(self, value: str) -> datetime:
        return parse_time(value)

    def validate_until(self, value: str) -> datetime:
        return parse_time(value)

    def validate(self, attrs):
        until = attrs.get("until") or timezone.now()
        since = attrs.get("since") or until - timedelta(seconds=DEFAULT_RANGE_S)
        if since >= until:
            raise serializers.ValidationError({"since": ["must be before until"]})
        if (until - since).total_seconds() > settings.METRICS_ROLLUP_RETENTION_S:
            raise serializers.ValidationError(
                {"since": [f"the range may span at most {settings.METRICS_ROLLUP_RETENTION_S} s (the history kept)"]}
            )
        return {**attrs, "since": since, "until": until}
