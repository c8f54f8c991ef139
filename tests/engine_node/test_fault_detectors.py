"""The report's two fault cases scripted on the simulator, detected end to end: two agents under the same steady
load (control plane on daphne with Postgres, evaluation in-process at 1 Hz, detector windows made short); one gets
the fault through the simulator's /sim/faults, the other runs normally for the same time. The faulty node's alert
fires, the normal one stays quiet. The two agents are connected to two control-plane processes (one each), as
behind a load balancer: what each process stores is what the one evaluation reads.

The detectors' windows are seconds here instead of minutes (the settings below) and the rules' `for` is cut to
match: the mechanism is the same at any length, only the figures turn over sooner. The agents keep their 10 s
sample windows: the slowed engine finishes its requests in bursts seconds apart, and a shorter window between two
bursts would hold no request at all.

- Batch timeout exceeded: the engine slows twentyfold (`latency_factor`), requests wait past their batch timeout at
  the gateway's batcher and the node's throughput collapses.
- GPU memory leak: the simulated GPU leaks (`memory_leak_mb_per_s`): memory used creeps up and, the engine kept busy,
  utilisation falls. Both figures are the simulator's (simulated), as the node's samples say.
"""

import json
import statistics
import time
import urllib.request

import pytest

from controlplane.accounts.models import User
from controlplane.accounts.roles import Role
from controlplane.alerts.defaults import install_default_rules
from controlplane.alerts.evaluation import evaluate
from controlplane.alerts.models import Alert, AlertRule, AlertRuleVersion
from controlplane.metrics.models import MetricSample
from controlplane.metrics.selectors import window_values
from tests.engine_node.fleet import AgentProcess, Traffic, engine_url, wait_until
from tests.engine_node.served_pool import served_pool
from tests.engine_node.shared_fleet import SharedRows, module_database

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.agents]

# ~20 ms engine steps: a short reply takes a few hundred ms, so eight requests in flight keep the engine busy at a
# load two shared CPU cores carry.
STEADY_PROFILE = """
latency:
  time_scale: 2.0
reply_length:
  median: 12
  sigma: 0.3
  min: 4
  max: 16
"""
DOCUMENT = {
    "inference_params": {
        "max_tokens": {"whitelist": [], "default": 16, "streaming_threshold": 16, "continuation_max_rounds": 0},
        "degradation": {"max_tokens": 16},
        # Eight requests in flight (the engine's seats) for twelve clients: some always wait at the batcher.
        "batch": {"min_size": 1, "max_size": 2, "timeout_ms": 50},
        "engine": {"max_num_seqs": 8},
    }
}


# One trend point a second; the batch detector compares its last 4 s with the 20 s before, the leak detector fits
# lines through 15 s (production: 60 s against 300 s, and 600 s).
BATCH_WINDOW_S, BATCH_BASELINE_S, LEAK_WINDOW_S = 4, 20, 15
# Both rules' `for` (10 s and 30 s in the default pack) scaled with their windows: the condition must hold for 5 s.
FOR_S = 5


@pytest.fixture(scope="module")
def shared_nodes(django_db_setup, django_db_blocker, tmp_path_factory):
    """gpu-1 and gpu-2 under steady figures, for both tests. Each node on a daphne process of its own: each process
    stores its node's samples, the evaluation reads both."""
    work = tmp_path_factory.mktemp("fleet")
    with module_database(django_db_blocker):
        owner = User.objects.create_user(username="fleet-owner", role=Role.SRE)
        nodes = ("gpu-1", "gpu-2")
        with served_pool(
            work, owner, document=DOCUMENT, profile=STEADY_PROFILE, nodes=nodes, reason="detector test", processes=2
        ) as (agents, _, _):
            rows = SharedRows()
            rows.keep()
            yield agents, rows


@pytest.fixture
def two_nodes(shared_nodes, transactional_db, settings):
    """The module's nodes, reset: their rows back after the flush, no fault on either engine and its memory
    allocated afresh (a leak is released only so), the default rules with a short `for`."""
    agents, rows = shared_nodes
    rows.restore()
    settings.ALERT_TREND_POINT_S = 1
    settings.ALERT_BATCH_TIMEOUT_WINDOW_S = BATCH_WINDOW_S
    settings.ALERT_BATCH_TIMEOUT_BASELINE_S = BATCH_BASELINE_S
    settings.ALERT_LEAK_WINDOW_S = LEAK_WINDOW_S
    for agent in agents:
        for method, path in (("DELETE", "/sim/faults"), ("POST", "/sleep"), ("POST", "/wake_up")):
            urllib.request.urlopen(urllib.request.Request(engine_url(agent) + path, method=method), timeout=10)
    wait_until(lambda: all(a.health()["status"] == "online" for a in agents), 30, "both nodes serving")
    install_default_rules(AlertRule, AlertRuleVersion)  # transactional tests empty the migration's pack
    AlertRuleVersion.objects.filter(rule__name__in=["batch-timeout", "gpu-memory-leak"]).update(for_s=FOR_S)
    yield agents
    rows.carry()


def set_faults(agent: AgentProcess, faults: dict) -> None:
    request = urllib.request.Request(
        f"{engine_url(agent)}/sim/faults", data=json.dumps(faults).encode(), method="POST",
        headers={"Content-Type": "application/json"},
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200


def evaluate_for(seconds: float, until=None) -> None:
    """Evaluate once a second for `seconds`, or until `until()` holds."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        evaluate()
        if until is not None and until():
            return
        time.sleep(1.0)


def alerts(rule: str, node: str) -> list[Alert]:
    return list(Alert.objects.filter(rule__name=rule, name=node))


def is_firing(rule: str, node: str) -> bool:
    return Alert.objects.filter(rule__name=rule, name=node, state=Alert.State.FIRING).exists()


def newest(node: str) -> dict:
    return MetricSample.objects.filter(scope="node", name=node, resolution_s=1).latest("t").values


def recent(node: str, metric: str, seconds: float) -> list[float]:
    """The node's non-null `metric` over its 1 s samples of the last `seconds`."""
    return window_values(scope="node", name=node, metric=metric, seconds=seconds)


def test_batch_timeouts_with_a_throughput_collapse_fire_on_the_faulty_node_only(two_nodes):
    faulty = two_nodes[0]
    with Traffic(two_nodes, per_agent_threads=12) as traffic:
        # Steady load until the baseline holds more than half its window (the detector's minimum): the collapse
        # must then fire before it makes up as much of the baseline as the steady load.
        evaluate_for(BATCH_WINDOW_S + BATCH_BASELINE_S * 0.6 + 1)
        steady = statistics.median(recent("gpu-1", "qps", BATCH_BASELINE_S))
        assert steady > 5, steady
        assert alerts("batch-timeout", "gpu-1") == [] and alerts("batch-timeout", "gpu-2") == []
        set_faults(faulty, {"latency_factor": 20.0})
        faulted = time.monotonic()
        evaluate_for(45, until=lambda: is_firing("batch-timeout", "gpu-1"))
        since_fault = time.monotonic() - faulted
        timeouts = recent("gpu-1", "batch_timeout_rate", since_fault)
        normal_qps = statistics.median(recent("gpu-2", "qps", since_fault))
        normal_timeouts = recent("gpu-2", "batch_timeout_rate", since_fault)
        # The engine at speed again: the requests still queued at its gateway finish before the clients stop.
        set_faults(faulty, {"latency_factor": 1.0})
    assert is_firing("batch-timeout", "gpu-1"), (steady, recent("gpu-1", "qps", since_fault), timeouts)
    alert = Alert.objects.get(rule__name="batch-timeout", name="gpu-1", state=Alert.State.FIRING)
    assert alert.value >= 0.3 and alert.rule_version.runbook == "batch-timeout-exceeded"
    assert statistics.median(timeouts) > 0.05, timeouts
    # The normal node ran the same load for the same time. Its requests wait past their batch timeout too (twelve
    # clients for eight seats: a busy engine), but its throughput held: nothing, not even pending.
    assert statistics.median(normal_timeouts) > 0.05 and normal_qps > steady / 2, (normal_qps, normal_timeouts)
    assert alerts("batch-timeout", "gpu-2") == []
    assert traffic.errors == []


def test_a_gpu_memory_leak_fires_on_the_leaking_node_only(two_nodes):
    leaking = two_nodes[0]
    with Traffic(two_nodes, per_agent_threads=12):
        evaluate_for(3)  # steady figures before the leak (the detector fits every point of its window)
        before = newest("gpu-1")
        assert before["gpu_memory_used"] == pytest.approx(0.9) and before["gpu_util"] > 0.5, before
        # 50 MB/s on the profile's 16 GiB pretend GPU: 4.6 % more memory over the leak window (the rule warns at 2 %),
        # the 10 % headroom full in ~33 s.
        set_faults(leaking, {"memory_leak_mb_per_s": 50.0})
        evaluate_for(75, until=lambda: is_firing("gpu-memory-leak", "gpu-1"))
        after = newest("gpu-1")
    assert is_firing("gpu-memory-leak", "gpu-1"), (before, after)
    alert = Alert.objects.get(rule__name="gpu-memory-leak", name="gpu-1", state=Alert.State.FIRING)
    assert alert.value >= 0.02 and alert.rule_version.runbook == "gpu-memory-leak"
    assert after["gpu_memory_used"] > before["gpu_memory_used"] and after["gpu_util"] < before["gpu_util"]
    assert alerts("gpu-memory-leak", "gpu-2") == []
    assert newest("gpu-2")["gpu_memory_used"] == pytest.approx(0.9)
