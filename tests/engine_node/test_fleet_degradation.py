"""Automatic degradation against a live agent: a scripted load ramp on a fake clock drives the evaluation in-process
(control plane on daphne with the Redis layer and Postgres, one agent on the simulator); the gateway's explain
endpoint must show the degraded parameters within a second of each transition, and the normal ones after it leaves.

The ramp is written as the node's samples at fake times a thousand seconds ahead, so they, not the agent's own
1 Hz samples, are the node's newest; the bundle pushes and the agent are real.
"""

import itertools
import json
import time
import urllib.request
from datetime import timedelta

import pytest
from django.utils import timezone

from controlplane.audit.models import AuditEntry
from controlplane.metrics.models import MetricSample
from controlplane.nodes.models import EngineNode, NodeCommand, Pool
from controlplane.nodes.services.engine_nodes import node_create
from controlplane.nodes.services.pools import pool_create, pool_publish
from controlplane.operations.degradation import (
    RESTART_REASON,
    degradation_disable,
    degradation_enable,
    degradation_evaluate,
)
from controlplane.operations.models import DegradationEvent
from controlplane.params.services.templates import template_create, template_version_create
from tests.engine_node import fleet
from tests.engine_node.fleet import FAST_PROFILE, AgentProcess, Traffic, wait_until
from tests.live_server import Daphne, daphnes
from tests.periodic import Periodic

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.agents]

MESSAGE = {"message": "我的订单到哪了？", "max_tokens": 1000}


def explain(agent: AgentProcess) -> dict:
    request = urllib.request.Request(
        f"{agent.url}/v1/policy/explain",
        data=json.dumps(MESSAGE).encode(),
        headers=agent.headers,
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def decision(agent: AgentProcess) -> dict:
    return explain(agent)["decision"]


@pytest.fixture
def node(tmp_path, sre):
    profile = tmp_path / "fast.yaml"
    profile.write_text(FAST_PROFILE)
    server = Daphne(tmp_path)
    server.start()
    pool = pool_create(actor=sre, name="staging", is_production=False)
    engine_node, token = node_create(actor=sre, name="gpu-1", pool=pool)
    agent = AgentProcess(
        name=engine_node.name, token=token, control_plane_url=server.ws_agent_url, work=tmp_path, profile=profile
    )
    try:
        fleet.start_agents([agent])
        wait_until(lambda: EngineNode.objects.filter(is_connected=True).count() == 1, 30, "the agent to connect")
        yield {"pool": pool, "agent": agent}
    finally:
        agent.stop()
        server.stop()


def test_a_load_ramp_degrades_the_pool_and_the_node_follows_within_a_second(node, sre):
    pool, gateway = node["pool"], node["agent"]
    template = template_create(actor=sre, name="chat")
    document = {
        "inference_params": {"degradation": {"enter_after_s": 10, "exit_after_s": 20}, "max_tokens": {"whitelist": []}}
    }
    version = template_version_create(actor=sre, template=template, document=document, base_number=None)
    pool_publish(actor=sre, pool=pool, version=version, reason="first")
    wait_until(lambda: explain(gateway)["template"] == "chat v1", 15, "the config")
    before = decision(gateway)
    assert before["degraded"] is False and before["max_tokens"] > 128

    fake = timezone.now() + timedelta(seconds=1000)
    clock = {"s": 0}

    def step(kv: float) -> list[DegradationEvent]:
        t = fake + timedelta(seconds=clock["s"])
        clock["s"] += 1
        MetricSample.objects.create(
            scope=MetricSample.Scope.NODE, name="gpu-1", pool="staging", t=t,
            resolution_s=MetricSample.Resolution.SECOND,
            values={"kv_cache_usage": kv, "gpu_util": 0.2, "queue_depth_short": 0, "queue_depth_long": 0},
        )  # fmt: skip
        return degradation_evaluate(now=t)

    # Ramp up through the exit and entry lines, with a dip that restarts the entry clock.
    assert [e for kv in (0.3, 0.5, 0.7, 0.85, 0.9, 0.92, 0.79) for e in step(kv)] == []
    assert [e for _ in range(10) for e in step(0.93)] == []
    assert decision(gateway)["degraded"] is False
    (entered,) = step(0.94)
    # Pushed on the transition: no further evaluation runs before the node has the degraded bundle.
    degraded = wait_until(lambda: (d := decision(gateway))["degraded"] and d, 15, "the degraded bundle", 0.02)
    assert entered.kind == "entered" and entered.cause == "automatic"
    assert (degraded["temperature"], degraded["max_tokens"], degraded["temperature_rule"]) == (0.7, 128, "degradation")

    # Ramp down: hovering between the lines keeps it degraded; 20 s below the exit line ends it.
    assert [e for kv in (0.75, 0.65, 0.7, 0.55, 0.62) * 4 for e in step(kv)] == []
    assert [e for _ in range(20) for e in step(0.4)] == []
    assert decision(gateway)["degraded"] is True
    (left,) = step(0.3)
    normal = wait_until(lambda: (d := decision(gateway))["degraded"] is False and d, 15, "the normal bundle", 0.02)
    assert left.kind == "left"
    assert (normal["temperature"], normal["max_tokens"]) == (before["temperature"], before["max_tokens"])
    audit = AuditEntry.objects.filter(action__startswith="pool.degrade").order_by("id")
    assert list(audit.values_list("action", "actor_name")) == [
        ("pool.degrade", "system"),
        ("pool.degrade_end", "system"),
    ]


# --- speculative decoding follows the degradation, one node at a time ------------------------------------------


def engine_cmdline(agent: AgentProcess) -> tuple[int, list[str]]:
    pid = agent.health()["engine_pid"]
    return pid, fleet.engine_cmdline(pid)


def speculative_flag(agent: AgentProcess) -> dict | None:
    """The engine child's --speculative-config, parsed, or None when it runs without one."""
    _, args = engine_cmdline(agent)
    value = fleet.flag_value(args, "--speculative-config")
    return json.loads(value) if value is not None else None


def Beat() -> Periodic:
    """`degradation_evaluate` every half second in a thread, as the beat schedule runs it in production: each pass
    sends a pool's next waiting restart once the one before it finished."""
    return Periodic(degradation_evaluate)


class Watch(Periodic):
    """Polls both agents' /healthz; `overlaps` counts the polls where no node of the pool was online."""

    def __init__(self, agents: list[AgentProcess]):
        super().__init__(self._poll, every_s=0.05)
        self.agents = agents
        self.statuses: dict[str, set[str]] = {a.name: set() for a in agents}
        self.overlaps = 0

    def _poll(self) -> None:
        now = {a.name: a.health()["status"] for a in self.agents}
        for name, status in now.items():
            self.statuses[name].add(status)
        if all(status != "online" for status in now.values()):
            self.overlaps += 1


def restarts(state: str | None = None):
    commands = NodeCommand.objects.filter(op=NodeCommand.Op.RESTART, reason=RESTART_REASON)
    return commands.filter(state=state) if state else commands


def assert_one_at_a_time(commands) -> None:
    """No two restarts of the pool were under way at once: each was sent after the one before it finished."""
    ordered = sorted(commands, key=lambda c: c.sent_at)
    for before, after in itertools.pairwise(ordered):
        assert after.sent_at >= before.finished_at, (
            f"{after.node.name}'s restart was sent at {after.sent_at:%H:%M:%S.%f} while {before.node.name}'s "
            f"ran until {before.finished_at:%H:%M:%S.%f}"
        )


@pytest.fixture
def two_nodes(tmp_path, sre):
    """Two agents on two daphne processes (one each, as behind a load balancer): the degradation's pushes and its
    one-at-a-time restarts reach the node of either process through the shared channel layer and database."""
    profile = tmp_path / "fast.yaml"
    profile.write_text(FAST_PROFILE)
    with daphnes(tmp_path, 2) as servers:
        pool = pool_create(actor=sre, name="staging", is_production=False)
        # About the degradation's restarts, not about canary stages: a publish reaches both nodes at once.
        Pool.objects.filter(pk=pool.pk).update(canary_stages=[{"percent": 100}])
        agents = []
        for name, server in zip(("gpu-1", "gpu-2"), servers, strict=True):
            _, token = node_create(actor=sre, name=name, pool=pool)
            agents.append(
                AgentProcess(
                    name=name, token=token, control_plane_url=server.ws_agent_url, work=tmp_path, profile=profile
                )
            )
        try:
            fleet.start_agents(agents)
            wait_until(lambda: EngineNode.objects.filter(is_connected=True).count() == 2, 30, "both agents to connect")
            yield {"pool": Pool.objects.get(pk=pool.pk), "agents": agents}
        finally:
            fleet.stop_agents(agents)


def test_degradation_restarts_nodes_one_at_a_time_without_speculative_decoding_and_back(two_nodes, sre):
    pool, agents = two_nodes["pool"], two_nodes["agents"]
    template = template_create(actor=sre, name="chat")
    document = {
        "inference_params": {
            "speculative": {"enabled": True, "method": "ngram", "num_speculative_tokens": 3},
            "degradation": {"speculative_decoding": False},
            "max_tokens": {"whitelist": []},
        }
    }
    version = template_version_create(actor=sre, template=template, document=document, base_number=None)
    pool_publish(actor=sre, pool=pool, version=version, reason="first")
    wait_until(
        lambda: EngineNode.objects.filter(applied_hash=version.content_hash).count() == 2, 60, "both nodes to ACK"
    )
    wait_until(lambda: all(a.health()["status"] == "online" for a in agents), 30, "both nodes online")
    for agent in agents:
        assert speculative_flag(agent) == {
            "method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1, "prompt_lookup_max": 4
        }  # fmt: skip
    pids = {a.name: engine_cmdline(a)[0] for a in agents}

    with Traffic(agents) as traffic, Beat() as beat, Watch(agents) as watch:
        started = time.monotonic()
        degradation_enable(actor=sre, pool=Pool.objects.get(pk=pool.pk), reason="queue building up, shed load")
        wait_until(lambda: restarts("succeeded").count() == 2, 90, "both degradation restarts to succeed")
        entered_s = time.monotonic() - started
        wait_until(lambda: all(a.health()["status"] == "online" for a in agents), 30, "both nodes online again")
        for agent in agents:
            assert speculative_flag(agent) is None, f"{agent.name} still runs speculative decoding"
            assert engine_cmdline(agent)[0] != pids[agent.name], f"{agent.name}'s engine was not restarted"
            assert decision(agent)["degraded"] is True
        assert_one_at_a_time(restarts().select_related("node"))
        pids = {a.name: engine_cmdline(a)[0] for a in agents}

        started = time.monotonic()
        degradation_disable(actor=sre, pool=Pool.objects.get(pk=pool.pk), reason="queue drained")
        wait_until(lambda: restarts("succeeded").count() == 4, 90, "both restarts back to speculative decoding")
        left_s = time.monotonic() - started
        wait_until(lambda: all(a.health()["status"] == "online" for a in agents), 30, "both nodes online again")
        for agent in agents:
            assert speculative_flag(agent) is not None, f"{agent.name} came back without speculative decoding"
            assert engine_cmdline(agent)[0] != pids[agent.name], f"{agent.name}'s engine was not restarted"
            assert decision(agent)["degraded"] is False
        assert_one_at_a_time(restarts().select_related("node"))

    assert beat.errors == []
    assert restarts().exclude(state="succeeded").count() == 0
    assert traffic.outcomes[200] > 0, (traffic.outcomes, traffic.errors[:5])
    assert traffic.failed == 0, (traffic.outcomes, traffic.errors[:5])
    # Each node left "online" for its restart, and never both at once.
    assert all({"draining", "restarting"} & seen for seen in watch.statuses.values()), watch.statuses
    assert watch.overlaps == 0, f"{watch.overlaps} polls saw neither node online"
    print(f"degradation restarts: both nodes without speculative decoding after {entered_s:.1f} s, with it again "
          f"after {left_s:.1f} s; {traffic.outcomes[200]} requests served, none failed")  # fmt: skip
