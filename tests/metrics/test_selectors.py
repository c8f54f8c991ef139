"""The reads the alerts part and the charts use: latest values, series, windows and each node's last sample."""

from datetime import UTC, datetime, timedelta

import pytest

from controlplane.metrics import selectors
from controlplane.metrics.models import MetricSample
from tests.metrics.conftest import sample_m
from tests.metrics.factories import second_rows

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def test_latest_values_are_each_entitys_newest_row_within_the_age_limit():
    second_rows(
        scope="node", name="gpu-1", start=NOW - timedelta(seconds=5), values=[sample_m(qps=q) for q in (1, 2, 3)]
    )
    second_rows(scope="node", name="gpu-2", start=NOW - timedelta(seconds=30), values=[sample_m(qps=9.0)])
    second_rows(scope="pool", name="prod-main", start=NOW - timedelta(seconds=1), values=[{"qps": 12.0}])
    latest = selectors.latest_values(scope="node", max_age_s=10, now=NOW)
    assert {name: v["qps"] for name, v in latest.items()} == {"gpu-1": 3}  # gpu-2 is too old; pools are not nodes
    assert selectors.latest_values(scope="node", max_age_s=60, now=NOW)["gpu-2"]["qps"] == 9.0
    assert selectors.latest_values(scope="pool", max_age_s=10, now=NOW) == {"prod-main": {"qps": 12.0}}


def test_last_sample_at_names_every_node_that_ever_sent_one(fleet_nodes):
    second_rows(scope="node", name="gpu-1", start=NOW - timedelta(seconds=3), values=[sample_m()] * 3)
    # gpu-2's second rows expired; its minute rows remain.
    MetricSample.objects.create(scope="node", name="gpu-2", t=NOW - timedelta(hours=3), resolution_s=60, values={})
    assert selectors.last_sample_at(now=NOW) == {
        "gpu-1": NOW - timedelta(seconds=1),
        "gpu-2": NOW - timedelta(hours=3),
    }  # sim-1 never sent one


def test_series_reads_second_rows_for_an_hour_and_minute_rows_beyond(settings):
    settings.METRICS_RAW_RETENTION_S = 3600
    now = datetime.now(UTC)  # which rows still exist depends on the real clock
    start = (now - timedelta(minutes=10)).replace(microsecond=0)
    second_rows(scope="fleet", name="fleet", start=start, values=[{"latency_p99_s": 1.0 + i / 10} for i in range(3)])
    MetricSample.objects.create(
        scope="fleet", name="fleet", t=start.replace(second=0), resolution_s=60, values={"latency_p99_s": 1.5}
    )
    fine = selectors.series(scope="fleet", name="fleet", metric="latency_p99_s", since=start, until=now)
    assert fine == [(start + timedelta(seconds=i), pytest.approx(1.0 + i / 10)) for i in range(3)]
    coarse = selectors.series(scope="fleet", name="fleet", metric="latency_p99_s", since=now - timedelta(hours=2))
    assert coarse == [(start.replace(second=0), 1.5)]
    # An hour that began before the oldest second rows still kept is read from minute rows too.
    settings.METRICS_RAW_RETENTION_S = 300
    coarse = selectors.series(scope="fleet", name="fleet", metric="latency_p99_s", since=start, until=now)
    assert coarse == [(start.replace(second=0), 1.5)]


def test_series_gives_none_for_null_figures_and_reads_buckets():
    now = datetime.now(UTC)
    second_rows(scope="node", name="gpu-1", start=now - timedelta(seconds=2), values=[sample_m(gpu_util=None)] * 2)
    since = now - timedelta(minutes=1)
    nulls = selectors.series(scope="node", name="gpu-1", metric="gpu_util", since=since)
    assert [v for _, v in nulls] == [None, None]
    buckets = selectors.series(scope="node", name="gpu-1", metric="length_hist.le512", since=since)
    assert [v for _, v in buckets] == [3.0, 3.0]


def test_window_values_are_the_non_null_values_of_the_last_seconds():
    values = [sample_m(latency_p99_s=v) for v in (2.5, 1.0, None, 1.2, 1.4)]
    second_rows(scope="pool", name="prod-main", start=NOW - timedelta(seconds=4), values=values)
    window = selectors.window_values(scope="pool", name="prod-main", metric="latency_p99_s", seconds=3, now=NOW)
    assert window == [1.0, 1.2, 1.4]  # 2.5 is 4 s old; the null second is left out
