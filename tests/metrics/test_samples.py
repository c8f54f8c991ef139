"""The sample check: a contract-A sample passes; anything else is refused with a reason naming the key."""

import math
import time

import pytest

from controlplane.metrics.samples import SampleRejected, sample_parse
from tests.metrics.conftest import sample

NOW = time.time()


def test_a_complete_sample_passes_unchanged():
    message = sample(t=NOW - 0.2)
    t, m = sample_parse(message, now=NOW)
    assert t == pytest.approx(NOW - 0.2)
    assert m == sample(t=NOW)["m"]


def test_nulls_are_allowed_where_the_figure_can_be_unknown():
    unknown = {k: None for k in ("latency_p50_s", "latency_p99_s", "gpu_util", "spec_acceptance_rate", "error_rate")}
    _, m = sample_parse(sample(t=NOW, **unknown), now=NOW)
    assert m["latency_p99_s"] is None


def test_an_older_agent_without_reasons_is_stored_with_none():
    message = sample(t=NOW)
    del message["m"]["absent"]
    _, m = sample_parse(message, now=NOW)
    assert m["absent"] == {}


def test_an_older_agent_without_intent_figures_counts_as_classifying_nothing():
    message = sample(t=NOW)
    for key in ("intent_classified", "intent_below_floor_share", "intent_confidence_hist"):
        del message["m"][key]
    _, m = sample_parse(message, now=NOW)
    assert (m["intent_classified"], m["intent_below_floor_share"], m["intent_confidence_hist"]) == (0, None, {})


def test_a_node_that_classified_nothing_sends_a_null_share():
    _, m = sample_parse(
        sample(t=NOW, intent_classified=0, intent_below_floor_share=None, intent_confidence_hist={"0-10": 0}), now=NOW
    )
    assert m["intent_below_floor_share"] is None


def without(key: str) -> dict:
    message = sample(t=NOW)
    del message["m"][key]
    return message


def with_extra(key: str, value) -> dict:
    message = sample(t=NOW)
    message["m"][key] = value
    return message


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        ("not a dict", "message: expected an object"),
        ({"type": "sample", "t": NOW, "m": {}}, "message: missing window_s"),
        ({**sample(t=NOW), "node": "x"}, "message: unknown node"),
        (without("qps"), "m: missing qps"),
        (with_extra("gpu_temp", 71), "m: unknown gpu_temp"),
        (sample(t=NOW, qps=None), "qps: expected a number, got NoneType"),
        (sample(t=NOW, qps="1.2"), "qps: expected a number, got str"),
        (sample(t=NOW, latency_p99_s=True), "latency_p99_s: expected a number or null, got bool"),
        (sample(t=NOW, latency_p99_s=math.nan), "latency_p99_s: expected a number or null, got float"),
        (sample(t=NOW, kv_cache_usage=-0.1), "kv_cache_usage: must not be negative"),
        (sample(t=NOW, queue_depth_short=1.5), "queue_depth_short: expected an integer, got float"),
        (sample(t=NOW, degraded=2), "degraded: expected 0 or 1"),
        (sample(t=NOW, length_hist={"le256": 1, "le4k": 2}), "length_hist: unknown bucket 'le4k'"),
        (sample(t=NOW, tiers={"strict": -1}), "tiers.strict: must not be negative"),
        (sample(t=NOW, batch_size_hist={"0": 1}), "batch_size_hist: unknown bucket '0'"),
        (sample(t=NOW, intents=[]), "intents: expected an object, got list"),
        (without("intent_below_floor_share"), "m: missing intent_below_floor_share"),
        (sample(t=NOW, intent_below_floor_share=1.5), "intent_below_floor_share: a share, at most 1"),
        (sample(t=NOW, intent_classified=13), "intent_confidence_hist: its counts must add up to intent_classified"),
        (sample(t=NOW - 3600), "t: -3600 s from the control plane's clock"),
        ({**sample(t=NOW), "window_s": 0}, "window_s: must be positive"),
        (sample(t=NOW, absent=[]), "absent: expected an object, got list"),
        (sample(t=NOW, absent={"qps": "no requests"}), "absent: 'qps' is not a figure that may be null"),
        (sample(t=NOW, absent={"gpu_temp": "no GPU"}), "absent: 'gpu_temp' is not a figure that may be null"),
        (sample(t=NOW, absent={"fragmentation_ratio": "no allocator"}), "absent.fragmentation_ratio: the figure has"),
        (sample(t=NOW, absent={"sm_util": ""}), "absent.sm_util: expected a printable text of 1 to 300"),
        (sample(t=NOW, absent={"sm_util": 7}), "absent.sm_util: expected a printable text of 1 to 300"),
    ],
)
def test_a_broken_sample_is_refused_with_a_reason(message, reason):
    with pytest.raises(SampleRejected) as refused:
        sample_parse(message, now=NOW)
    assert refused.value.reason.startswith(reason)


def test_a_sample_over_another_window_than_the_control_planes_is_refused_naming_both(settings):
    """An agent whose ENGINE_NODE_SAMPLE_WINDOW_S differs from METRICS_SAMPLE_WINDOW_S would have its percentiles read
    over the wrong span (rollout readiness, impact noise, intent-drift counts): refused, never misread."""
    with pytest.raises(SampleRejected) as refused:
        sample_parse({**sample(t=NOW), "window_s": 2}, now=NOW)
    assert refused.value.reason == (
        "window_s: 2 s, but this control plane reads 10 s sample windows (its METRICS_SAMPLE_WINDOW_S and the "
        "agent's ENGINE_NODE_SAMPLE_WINDOW_S must say the same)"
    )
    settings.METRICS_SAMPLE_WINDOW_S = 2
    assert sample_parse({**sample(t=NOW), "window_s": 2}, now=NOW)[0] == NOW
