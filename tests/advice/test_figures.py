"""Window figures from the pool's stored 1 s rows: means over the window only, load per row, loaded seconds' P99."""

from datetime import timedelta

import pytest
from django.utils import timezone

from controlplane.advice.figures import WINDOW_S, pool_window_figures, row_load
from controlplane.params import schema
from tests.metrics.factories import second_rows

pytestmark = pytest.mark.django_db
SEED = schema.effective({})


def row(**values) -> dict:
    return {"nodes": 2, "qps": 10.0, **values}


def test_means_cover_the_window_and_not_older_rows():
    now = timezone.now().replace(microsecond=0)
    second_rows(
        scope="pool",
        name="staging",
        start=now - timedelta(seconds=WINDOW_S + 120),
        values=[row(batch_idle_ratio=0.9)] * 60,
    )
    second_rows(
        scope="pool",
        name="staging",
        start=now - timedelta(seconds=299),
        values=[row(batch_idle_ratio=0.2)] * 150 + [row(batch_idle_ratio=0.1)] * 150,
    )
    second_rows(
        scope="pool", name="other", start=now - timedelta(seconds=100), values=[row(batch_idle_ratio=0.99)] * 100
    )
    f = pool_window_figures(pool="staging", params=SEED, load_threshold=0.8, now=now)
    assert f.samples["batch_idle_ratio"] == 300
    assert f.mean("batch_idle_ratio") == pytest.approx(0.15)
    assert f.mean("spec_rejection_rate") is None  # no row carried it


def test_a_figure_in_fewer_than_a_minute_of_rows_is_thin():
    now = timezone.now().replace(microsecond=0)
    second_rows(
        scope="pool", name="staging", start=now - timedelta(seconds=59), values=[row(batch_idle_ratio=0.5)] * 59
    )
    f = pool_window_figures(pool="staging", params=SEED, load_threshold=0.8, now=now)
    assert f.samples["batch_idle_ratio"] == 59 and f.mean("batch_idle_ratio") is None


def test_histograms_add_up_over_the_window():
    now = timezone.now().replace(microsecond=0)
    values = [row(batch_size_hist={"2": 3, "4": 1}, length_hist={"le256": 9, "gt2k": 1})] * 10
    second_rows(scope="pool", name="staging", start=now - timedelta(seconds=20), values=values)
    f = pool_window_figures(pool="staging", params=SEED, load_threshold=0.8, now=now)
    assert f.batch_size_hist == {2: 30, 4: 10}
    assert f.length_hist == {"le256": 90, "gt2k": 10}


def test_loaded_p99_reads_only_the_seconds_above_the_load_line():
    now = timezone.now().replace(microsecond=0)
    values = [row(kv_cache_usage=0.9, latency_p99_s=2.4)] * 70 + [row(kv_cache_usage=0.8, latency_p99_s=0.5)] * 70
    second_rows(scope="pool", name="staging", start=now - timedelta(seconds=200), values=values)
    f = pool_window_figures(pool="staging", params=SEED, load_threshold=0.8, now=now)
    assert f.loaded_seconds == 70  # 0.8 exactly is not above the line
    assert f.loaded_p99_s == pytest.approx(2.4)


def test_row_load_is_the_highest_signal_with_queues_over_their_limits_times_nodes():
    assert row_load({"nodes": 2, "kv_cache_usage": 0.3, "sm_util": 0.5, "queue_depth_short": 256}, SEED) == 0.5
    assert row_load({"nodes": 1, "kv_cache_usage": 0.3, "gpu_util": 1.0}, SEED) == 0.3  # any kernel running: not load
    assert row_load({"nodes": 1, "kv_cache_usage": 0.3, "queue_depth_long": 16}, SEED) == 1.0
    assert row_load({"nodes": 1, "queue_depth_long": 64}, SEED) == 1.0  # never above saturated
    assert row_load({"nodes": 1, "qps": 3}, SEED) is None
