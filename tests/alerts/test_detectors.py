"""The trend detectors of the seed's two fault cases, on samples written at a fake clock (windows made short).

Batch timeout (case 1): timeouts together with a throughput drop fire; a drop without timeouts (traffic going down)
and timeouts without a drop (a busy engine holding its throughput) stay quiet. GPU memory leak (case 2): utilisation
trending down while memory trends up fires; a steady node, a one-off step in memory, and utilisation falling with
memory flat stay quiet.
"""

import itertools

import pytest

from controlplane.alerts.detectors import line
from controlplane.alerts.evaluation import evaluate
from controlplane.alerts.exposition import exposition
from controlplane.alerts.models import Alert, NodeTrendTrack

POINT_S = 2


@pytest.fixture(autouse=True)
def short_windows(settings):
    settings.ALERT_TREND_POINT_S = POINT_S
    settings.ALERT_BATCH_TIMEOUT_WINDOW_S = 20
    settings.ALERT_BATCH_TIMEOUT_BASELINE_S = 40
    settings.ALERT_LEAK_WINDOW_S = 60


def run(fleet, clock, seconds: int, figures, node: str = "gpu-1") -> list[Alert]:
    """Sample `node` every 2 s for `seconds` with `figures(elapsed)`, evaluating after each sample."""
    for elapsed in range(0, seconds, POINT_S):
        at = clock.tick(POINT_S)
        fleet.sample(node, at, **figures(elapsed))
        evaluate(now=at)
    return list(Alert.objects.filter(name=node, rule__name__in=["batch-timeout", "gpu-memory-leak"]))


def firing(alerts: list[Alert], rule: str) -> Alert | None:
    return next((a for a in alerts if a.rule.name == rule and a.state == Alert.State.FIRING), None)


def test_batch_timeouts_with_a_throughput_collapse_fire_and_a_steady_run_stays_quiet(fleet, clock):
    fleet.add("gpu-1")
    steady = run(fleet, clock, 90, lambda t: {"qps": 50.0, "batch_timeout_rate": 0.0, "requests_waiting": 0})
    assert steady == []

    def collapse(t):
        if t < 10:
            return {"qps": 50.0, "batch_timeout_rate": 0.0, "requests_waiting": 0}
        return {"qps": 12.0, "batch_timeout_rate": 0.4, "requests_waiting": 0}

    alerts = run(fleet, clock, 46, collapse)
    alert = firing(alerts, "batch-timeout")
    assert alert is not None and alert.severity == "critical"
    assert alert.value == pytest.approx(1 - 12 / 50, abs=0.05)
    assert alert.rule_version.runbook == "batch-timeout-exceeded"
    text = exposition(now=clock.now).decode()
    assert 'controlplane_node_batch_timeout_throughput_drop_ratio{node="gpu-1",pool="prod-main"}' in text


def test_a_drop_without_timeouts_and_timeouts_without_a_drop_stay_quiet(fleet, clock):
    fleet.add("gpu-1")
    fleet.add("gpu-2")

    def traffic_falls(t):
        return {"qps": 50.0 if t < 50 else 5.0, "batch_timeout_rate": 0.0, "requests_waiting": 0}

    assert run(fleet, clock, 90, traffic_falls) == []

    def busy_but_steady(t):
        return {"qps": 5.0, "batch_timeout_rate": 0.5, "requests_waiting": 3}

    assert run(fleet, clock, 90, busy_but_steady, node="gpu-2") == []


def test_vllms_own_queue_counts_as_timeouts(fleet, clock):
    fleet.add("gpu-1")

    def engine_backlog(t):
        return {"qps": 40.0 if t < 50 else 10.0, "batch_timeout_rate": 0.0, "requests_waiting": 0 if t < 50 else 6}

    assert firing(run(fleet, clock, 90, engine_backlog), "batch-timeout") is not None


def test_gpu_utilisation_falling_while_memory_creeps_up_fires_and_a_steady_node_stays_quiet(fleet, clock):
    fleet.add("gpu-1")
    assert run(fleet, clock, 120, lambda t: {"gpu_util": 0.8 + 0.02 * (t % 3), "gpu_memory_used": 0.9}) == []

    def leak(t):
        return {"gpu_util": 0.9 - 0.004 * t, "gpu_memory_used": 0.8 + 0.001 * t}

    alerts = run(fleet, clock, 120, leak)
    alert = firing(alerts, "gpu-memory-leak")
    assert alert is not None and alert.severity == "critical"
    assert alert.value == pytest.approx(0.06, abs=0.01)  # 0.1 % a second over the 60 s window
    text = exposition(now=clock.now).decode()
    assert 'controlplane_node_gpu_memory_leak_rise_ratio{node="gpu-1",pool="prod-main"}' in text


def test_a_step_in_memory_or_falling_utilisation_alone_is_not_a_leak(fleet, clock):
    fleet.add("gpu-1")
    fleet.add("gpu-2")

    def engine_started(t):
        # Memory steps up once (an engine allocating its pool) while utilisation falls as a replay ends.
        return {"gpu_util": 0.8 - 0.004 * t, "gpu_memory_used": 0.2 if t < 90 else 0.9}

    assert run(fleet, clock, 120, engine_started) == []

    def idle_night(t):
        return {"gpu_util": max(0.0, 0.8 - 0.01 * t), "gpu_memory_used": 0.9}

    assert run(fleet, clock, 120, idle_night, node="gpu-2") == []


def test_points_are_kept_one_per_period_and_only_for_the_longest_window(fleet, clock):
    fleet.add("gpu-1")
    run(fleet, clock, 200, lambda t: {"qps": 1.0, "gpu_util": 0.5, "gpu_memory_used": 0.9})
    points = NodeTrendTrack.objects.get(node="gpu-1").points
    # The longest window is the batch detector's 20 + 40 s, plus one point.
    assert 30 <= len(points) <= 32
    assert all(b[0] - a[0] >= POINT_S for a, b in itertools.pairwise(points))


def test_least_squares_line():
    slope, r2 = line([0, 1, 2, 3], [1, 3, 5, 7])
    assert slope == pytest.approx(2) and r2 == pytest.approx(1)
    assert line([0, 1, 2], [5, 5, 5]) == (0.0, 0.0)
