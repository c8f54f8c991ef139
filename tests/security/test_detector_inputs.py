"""What a hostile node, profile or operator environment can do to the fault-case detectors: nothing beyond its own
figures, refused with the field named.

- A node's sample with a detector input that is not a finite, non-negative number is dropped whole, naming the key.
- A node that sends samples as fast as it can still adds at most one trend point per ALERT_TREND_POINT_S, and its
  track never outgrows the longest window: the evaluator's stored state is bounded whatever a node sends.
- A simulator fault rate that is not a finite number in range is refused naming the field (no NaN leak that
  slips past the range check and poisons every figure).
- Detector windows too short to hold three trend points stop the control plane at start with the setting named.
"""

import math
import time
from datetime import timedelta

import pytest

from controlplane.alerts.defaults import install_default_rules
from controlplane.alerts.detectors import horizon_s
from controlplane.alerts.evaluation import evaluate
from controlplane.alerts.models import AlertRule, AlertRuleVersion, NodeTrendTrack
from controlplane.metrics.samples import SampleRejected, sample_parse
from engine_node.simulator.profile import Faults, ProfileError
from tests.alerts.conftest import Clock, Fleet
from tests.factories import pools
from tests.metrics.conftest import sample
from tests.security.test_secret_key import manage_check

NOW = time.time()


@pytest.fixture
def fleet(users) -> Fleet:
    install_default_rules(AlertRule, AlertRuleVersion)
    staging, prod = pools(users["sre"])
    return Fleet(users["sre"], staging, prod)


@pytest.mark.parametrize("key", ["gpu_memory_used", "batch_timeout_rate"])
@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (math.nan, "expected a number or null, got float"),
        (math.inf, "expected a number or null, got float"),
        (-0.5, "must not be negative"),
        ("0.9", "expected a number or null, got str"),
        (True, "expected a number or null, got bool"),
    ],
)
def test_a_hostile_detector_input_drops_the_sample_naming_the_key(key, value, reason):
    with pytest.raises(SampleRejected) as refused:
        sample_parse(sample(t=NOW, **{key: value}), now=NOW)
    assert refused.value.reason == f"{key}: {reason}"


def test_a_node_flooding_samples_adds_one_point_per_period_and_its_track_stays_bounded(fleet, settings):
    settings.ALERT_TREND_POINT_S = 10
    clock = Clock()
    fleet.add("gpu-1")
    for _ in range(30):  # thirty passes within one point's period, each with a fresh sample
        at = clock.tick(0.2)
        fleet.sample("gpu-1", at, qps=1.0, gpu_util=0.5, gpu_memory_used=0.9)
        evaluate(now=at)
    assert len(NodeTrendTrack.objects.get(node="gpu-1").points) == 1
    for _ in range(200):  # much longer than the longest window, a point's worth apart
        at = clock.tick(10)
        fleet.sample("gpu-1", at, qps=1.0, gpu_util=0.5, gpu_memory_used=0.9)
        evaluate(now=at)
    points = NodeTrendTrack.objects.get(node="gpu-1").points
    assert len(points) <= horizon_s() / 10 + 1
    assert points[0][0] > (clock.now - timedelta(seconds=horizon_s())).timestamp()


@pytest.mark.parametrize("value", [math.nan, math.inf, -1.0, 1e7, "10", True])
def test_a_hostile_leak_rate_is_refused_naming_the_field(value):
    with pytest.raises(ProfileError) as refused:
        Faults().updated({"memory_leak_mb_per_s": value})
    assert str(refused.value).startswith("faults.memory_leak_mb_per_s: must be")


def test_a_nan_latency_factor_is_refused_too():
    with pytest.raises(ProfileError, match=r"faults\.latency_factor: must be a finite number"):
        Faults().updated({"latency_factor": math.nan})


@pytest.mark.parametrize(
    ("variable", "value"),
    [("ALERT_LEAK_WINDOW_S", "5"), ("ALERT_TREND_POINT_S", "0"), ("ALERT_BATCH_TIMEOUT_BASELINE_S", "soon")],
)
@pytest.mark.subprocess
def test_detector_windows_that_cannot_hold_a_trend_stop_the_start_naming_the_setting(tmp_path, variable, value):
    result = manage_check(tmp_path, **{variable: value})
    assert result.returncode != 0
    assert variable in result.stderr
