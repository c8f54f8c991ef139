"""Reads of metric history: latest figures, series for charts and alert windows, each node's last sample time."""

import math
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection
from django.db.models import Count, FloatField, OuterRef, Q, Subquery, Sum
from django.db.models.fields.json import KeyTextTransform, KeyTransform
from django.db.models.functions import Cast, Coalesce
from django.utils import timezone

from controlplane.metrics.models import MetricSample
from controlplane.metrics.samples import ABSENT, MAX_CLOCK_SKEW_S
from controlplane.nodes.models import EngineNode

# Ranges up to this long are read from 1 s rows (while those are kept), longer ones from 60 s rows; a browser's
# "last hour" reaches a little further back than the server's by the time it arrives, hence the slack.
FINE_RANGE_S = 3600
RANGE_SLACK_S = 60
SIMULATOR_BACKEND = "simulator"
# Node rows carry the agent's clock: one running a little ahead must not look silent ("now" bounds reads only this
# loosely; the sample check refuses anything further off).
CLOCK_SKEW = timedelta(seconds=MAX_CLOCK_SKEW_S)


def latest_values(*, scope: str, max_age_s: float, now: datetime | None = None) -> dict[str, dict]:
    """name -> values of the newest 1 s row of each entity of `scope` whose newest row is at most max_age_s old."""
    now = now or timezone.now()
    rows = MetricSample.objects.filter(
        scope=scope,
        resolution_s=MetricSample.Resolution.SECOND,
        t__gte=now - timedelta(seconds=max_age_s),
        t__lte=now + CLOCK_SKEW,
    )
    if connection.vendor == "postgresql":
        return dict(rows.order_by("name", "-t").distinct("name").values_list("name", "values"))
    newest: dict[str, tuple[datetime, dict]] = {}
    for name, t, values in rows.values_list("name", "t", "values"):
        if name not in newest or t > newest[name][0]:
            newest[name] = (t, values)
    return {name: values for name, (_, values) in newest.items()}


def node_absent_figures(*, name: str, max_age_s: float, now: datetime | None = None) -> dict[str, str]:
    """figure -> why it is null, from the node's newest 1 s row (at most max_age_s old); {} when none is."""
    now = now or timezone.now()
    values = (
        MetricSample.objects.filter(
            scope=MetricSample.Scope.NODE,
            name=name,
            resolution_s=MetricSample.Resolution.SECOND,
            t__gte=now - timedelta(seconds=max_age_s),
            t__lte=now + CLOCK_SKEW,
        )
        .order_by("-t")
        .values_list("values", flat=True)
        .first()
    )
    absent = (values or {}).get(ABSENT)
    return {str(k): str(v) for k, v in absent.items()} if isinstance(absent, dict) else {}


def last_sample_at(*, now: datetime | None = None) -> dict[str, datetime]:
    """Node name -> time of its newest sample (1 s rows, else the newest minute row), for every registered node that
    ever sent one. One query: an index lookup per node, however long the history."""
    now = now or timezone.now()

    def newest(resolution: int):
        return Subquery(
            MetricSample.objects.filter(
                scope=MetricSample.Scope.NODE, name=OuterRef("name"), resolution_s=resolution, t__lte=now + CLOCK_SKEW
            )
            .order_by("-t")
            .values("t")[:1]
        )

    nodes = EngineNode.objects.annotate(
        newest=Coalesce(newest(MetricSample.Resolution.SECOND), newest(MetricSample.Resolution.MINUTE))
    )
    return {name: t for name, t in nodes.values_list("name", "newest") if t is not None}


def series(
    *, scope: str, name: str, metric: str, since: datetime, until: datetime | None = None
) -> list[tuple[datetime, float | None]]:
    """(t, value) of one figure of one entity, oldest first, from 1 s rows for ranges up to an hour (60 s rows for
    longer ones or older data); None where the figure was null or is not a number."""
    until = until or timezone.now()
    resolution = history_resolution(since=since, until=until)
    t, columns = history(scope=scope, name=name, metrics=[metric], since=since, until=until, resolution_s=resolution)
    return [(when, _number(value)) for when, value in zip(t, columns[metric], strict=True)]


def window_values(*, scope: str, name: str, metric: str, seconds: float, now: datetime | None = None) -> list[float]:
    """The non-null values of one figure in the 1 s rows of the last `seconds`, oldest first (alert windows)."""
    now = now or timezone.now()
    _, columns = history(
        scope=scope,
        name=name,
        metrics=[metric],
        since=now - timedelta(seconds=seconds),
        until=now,
        resolution_s=MetricSample.Resolution.SECOND,
    )
    return [value for value in map(_number, columns[metric]) if value is not None]


def pool_intent_totals(*, since: datetime, until: datetime, resolution_s: int) -> dict[str, tuple[float, float]]:
    """pool -> (sum of intent_classified, sum of intent_classified x intent_below_floor_share) over its rows in
    (since, until]: a window's classified-weighted share without its rows leaving the database (one row per pool)."""
    classified = Cast(KeyTextTransform("intent_classified", "values"), FloatField())
    share = Cast(KeyTextTransform("intent_below_floor_share", "values"), FloatField())
    rows = (
        MetricSample.objects.filter(scope=MetricSample.Scope.POOL, resolution_s=resolution_s, t__gt=since, t__lte=until)
        .values("name")
        # A row with classified requests always has a share (controlplane/metrics/samples.py checks it).
        .annotate(classified=Sum(classified), below=Sum(classified * share))
        .values_list("name", "classified", "below")
    )
    return {name: (total, below or 0.0) for name, total, below in rows if total and total > 0}


def pool_intent_rows(
    *, since: datetime, until: datetime, resolution_s: int
) -> dict[str, list[tuple[float, float, float]]]:
    """pool -> [(unix t, intent_classified, intent_below_floor_share)] of its rows in (since, until], oldest first;
    rows with nothing classified are left out. One query for every pool (the alert pass reads it once)."""
    rows = (
        MetricSample.objects.filter(scope=MetricSample.Scope.POOL, resolution_s=resolution_s, t__gt=since, t__lte=until)
        .order_by("t")
        .annotate(classified=_key("intent_classified"), share=_key("intent_below_floor_share"))
        .values_list("name", "t", "classified", "share")
    )
    result: dict[str, list[tuple[float, float, float]]] = {}
    for name, t, classified, share in rows:
        classified, share = _number(classified), _number(share)
        if classified and classified > 0 and share is not None:
            result.setdefault(name, []).append((t.timestamp(), classified, share))
    return result


def history_resolution(*, since: datetime, until: datetime, now: datetime | None = None) -> int:
    """1 for a range of at most an hour that 1 s rows still cover, 60 otherwise."""
    now = now or timezone.now()
    raw_kept_since = now - timedelta(seconds=settings.METRICS_RAW_RETENTION_S + RANGE_SLACK_S)
    if (until - since).total_seconds() <= FINE_RANGE_S + RANGE_SLACK_S and since >= raw_kept_since:
        return MetricSample.Resolution.SECOND
    return MetricSample.Resolution.MINUTE


def history(
    *, scope: str, name: str, metrics: list[str], since: datetime, until: datetime, resolution_s: int
) -> tuple[list[datetime], dict[str, list]]:
    """Columns for charts: the row times and, per metric, its value in each row (a count map stays a dict).
    A metric may name a bucket of a count map: `length_hist.gt2k`. Only the named keys leave the database."""
    annotations = {f"m{i}": _key(metric) for i, metric in enumerate(metrics)}
    if resolution_s == MetricSample.Resolution.MINUTE:
        since = since.replace(second=0, microsecond=0)  # the minute row that covers `since`
    rows = (
        MetricSample.objects.filter(scope=scope, name=name, resolution_s=resolution_s, t__gte=since, t__lte=until)
        .order_by("t")
        .annotate(**annotations)
        .values_list("t", *annotations)
    )
    times: list[datetime] = []
    columns: dict[str, list] = {metric: [] for metric in metrics}
    for t, *values in rows:
        times.append(t)
        for metric, value in zip(metrics, values, strict=True):
            columns[metric].append(value)
    return times, columns


def simulated_node_counts(*, pool: str | None = None) -> tuple[int, int]:
    """(nodes whose engine is the simulator, all nodes) of the fleet or one pool: charts label simulated figures."""
    nodes = EngineNode.objects.all() if pool is None else EngineNode.objects.filter(pool__name=pool)
    counts = nodes.aggregate(total=Count("pk"), simulated=Count("pk", filter=Q(backend=SIMULATOR_BACKEND)))
    return counts["simulated"], counts["total"]


def _key(metric: str):
    expression = "values"
    for part in metric.split("."):
        expression = KeyTransform(part, expression)
    return expression


def _number(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)
