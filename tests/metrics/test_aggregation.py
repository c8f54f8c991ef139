"""Pool and fleet figures from node samples, and minute rows from second rows (rules: metrics/aggregation.py)."""

import pytest

from controlplane.metrics.aggregation import aggregate, roll_up
from tests.metrics.conftest import sample_m


def test_pool_figures_sum_counts_take_the_worst_percentile_and_weight_rates_by_requests():
    busy = sample_m(qps=3.0, latency_p99_s=0.9, error_rate=0.1, kv_cache_usage=0.8, degraded=1, queue_depth_short=2)
    idle = sample_m(qps=1.0, latency_p99_s=1.7, error_rate=0.5, kv_cache_usage=0.2, degraded=0, queue_depth_short=1)
    pool = aggregate([busy, idle])
    assert pool["nodes"] == 2
    assert pool["qps"] == pytest.approx(4.0)
    assert pool["queue_depth_short"] == 3
    assert pool["degraded"] == 1  # one degraded node
    assert pool["latency_p99_s"] == 1.7  # the worst node's
    assert pool["error_rate"] == pytest.approx((0.1 * 3 + 0.5 * 1) / 4)  # request-weighted
    assert pool["kv_cache_usage"] == pytest.approx(0.5)  # each host once
    assert pool["length_hist"] == {"le256": 12, "le512": 6, "le1k": 4, "le2k": 2, "gt2k": 0}
    assert pool["intents"] == {"order_status": 16, "refund": 8}


def test_null_figures_are_left_out_and_all_null_stays_null():
    with_gpu = sample_m(gpu_util=0.6, latency_p99_s=None)
    without_gpu = sample_m(gpu_util=None, latency_p99_s=None)
    pool = aggregate([with_gpu, without_gpu])
    assert pool["gpu_util"] == 0.6
    assert pool["latency_p99_s"] is None


def test_rates_of_idle_nodes_are_a_plain_mean():
    pool = aggregate([sample_m(qps=0.0, spec_acceptance_rate=0.6), sample_m(qps=0.0, spec_acceptance_rate=0.8)])
    assert pool["spec_acceptance_rate"] == pytest.approx(0.7)


def test_a_minute_row_averages_figures_sums_buckets_and_keeps_the_restart_counter():
    seconds = [
        sample_m(qps=1.0, latency_p99_s=1.0, engine_restarts=2, length_hist={"le256": 1}),
        sample_m(qps=3.0, latency_p99_s=None, engine_restarts=3, length_hist={"le256": 2, "gt2k": 1}),
    ]
    minute = roll_up(seconds)
    assert minute["samples"] == 2
    assert minute["qps"] == pytest.approx(2.0)
    assert minute["latency_p99_s"] == 1.0  # the null second is left out
    assert minute["engine_restarts"] == 3
    assert minute["length_hist"] == {"le256": 3, "gt2k": 1}
    assert minute["gpu_util"] is None


def test_the_pool_share_below_the_floor_counts_every_classified_request_once():
    busy = sample_m(intent_classified=90, intent_below_floor_share=0.1, intent_confidence_hist={"90-100": 90})
    quiet = sample_m(intent_classified=10, intent_below_floor_share=0.9, intent_confidence_hist={"10-20": 10})
    idle = sample_m(intent_classified=0, intent_below_floor_share=None, intent_confidence_hist={})
    pool = aggregate([busy, quiet, idle])
    assert pool["intent_classified"] == 100
    assert pool["intent_below_floor_share"] == pytest.approx((9 + 9) / 100)  # not the nodes' mean, 0.5
    assert pool["intent_confidence_hist"] == {"90-100": 90, "10-20": 10}
    assert aggregate([idle])["intent_below_floor_share"] is None


def test_a_minute_row_weights_the_share_below_the_floor_by_classified_requests():
    seconds = [
        sample_m(intent_classified=30, intent_below_floor_share=0.0),
        sample_m(intent_classified=10, intent_below_floor_share=0.8),
        sample_m(intent_classified=0, intent_below_floor_share=None),
    ]
    minute = roll_up(seconds)
    assert minute["intent_below_floor_share"] == pytest.approx(8 / 40)
    assert minute["intent_classified"] == pytest.approx(40 / 3)  # a mean, as every figure of a minute row
