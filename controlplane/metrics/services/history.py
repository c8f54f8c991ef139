"""Downsampled history: 1 s rows roll up into 60 s rows each minute; old rows of either resolution expire.

The rollup is idempotent (a minute row is upserted) and catches up after missed runs: it rolls every complete
minute after the newest minute row, back at most as far as 1 s rows are kept. A minute counts as complete
`ROLLUP_GRACE_S` after it ends, so samples still queued in the ingestor are in before it is read.
"""

from collections import defaultdict
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Max, Min
from django.utils import timezone

from controlplane.metrics.aggregation import roll_up
from controlplane.metrics.models import MetricSample

ROLLUP_GRACE_S = 10
MINUTE = timedelta(minutes=1)
SECOND_ROWS = MetricSample.objects.filter(resolution_s=MetricSample.Resolution.SECOND)
MINUTE_ROWS = MetricSample.objects.filter(resolution_s=MetricSample.Resolution.MINUTE)


def metric_samples_roll_up(*, now: datetime | None = None) -> int:
    """Write the 60 s rows of every complete minute not rolled up yet; returns how many minute rows it wrote."""
    now = now or timezone.now()
    end = _minute_start(now - timedelta(seconds=ROLLUP_GRACE_S))
    oldest_kept = now - timedelta(seconds=settings.METRICS_RAW_RETENTION_S)
    newest_minute = MINUTE_ROWS.aggregate(newest=Max("t"))["newest"]
    if newest_minute is not None:
        start = newest_minute + MINUTE
    else:
        oldest = SECOND_ROWS.aggregate(oldest=Min("t"))["oldest"]
        if oldest is None:
            return 0
        start = _minute_start(oldest)
    start = max(start, _minute_start(oldest_kept))
    written = 0
    while start < end:
        written += _roll_up_minute(start)
        start += MINUTE
    return written


def _roll_up_minute(start: datetime) -> int:
    entities: dict[tuple[str, str], list[dict]] = defaultdict(list)
    pools: dict[tuple[str, str], str] = {}
    rows = SECOND_ROWS.filter(t__gte=start, t__lt=start + MINUTE).order_by("t")
    for scope, name, pool, values in rows.values_list("scope", "name", "pool", "values").iterator(chunk_size=2000):
        entities[(scope, name)].append(values)
        pools[(scope, name)] = pool
    minute_rows = [
        MetricSample(
            scope=scope,
            name=name,
            pool=pools[(scope, name)],
            t=start,
            resolution_s=MetricSample.Resolution.MINUTE,
            values=roll_up(values),
        )
        for (scope, name), values in entities.items()
    ]
    MetricSample.objects.bulk_create(
        minute_rows,
        update_conflicts=True,
        unique_fields=["scope", "name", "resolution_s", "t"],
        update_fields=["values", "pool"],
        batch_size=500,
    )
    return len(minute_rows)


def metric_samples_expire(*, now: datetime | None = None) -> dict[int, int]:
    """Delete 1 s rows older than METRICS_RAW_RETENTION_S and 60 s rows older than METRICS_ROLLUP_RETENTION_S;
    returns how many rows of each resolution went."""
    now = now or timezone.now()
    deleted = {}
    for resolution, keep_s in (
        (MetricSample.Resolution.SECOND, settings.METRICS_RAW_RETENTION_S),
        (MetricSample.Resolution.MINUTE, settings.METRICS_ROLLUP_RETENTION_S),
    ):
        cutoff = now - timedelta(seconds=keep_s)
        deleted[int(resolution)], _ = MetricSample.objects.filter(resolution_s=resolution, t__lt=cutoff).delete()
    return deleted


def _minute_start(t: datetime) -> datetime:
    return t.replace(second=0, microsecond=0)
