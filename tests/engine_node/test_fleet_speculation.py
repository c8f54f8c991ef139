"""The speculative-decoding rule on a live fleet: control plane on daphne (Redis layer, Postgres), two agents on the
simulator (whose spec-decode counters and per-request speed are vLLM's metric names), steady client traffic.

Drafts stop matching (the simulator's spec_acceptance_rate fault): after three consecutive rejected windows each node
asks for speculation off, the control plane grants one node of the pool at a time, and each restarts drained
without --speculative-config; no request fails. The traffic's drafts match again: after the probe wait, with
generation slow, each node turns speculation back on (one at a time again) and, its drafts accepted, keeps it.

The template declares every speed slow (`resume_below_tokens_per_s` at its maximum): the simulator at test speed
generates thousands of tokens per second; the speed condition itself is covered in test_speculation_units.py.
"""

import json
import urllib.request

import pytest

from controlplane.audit.models import AuditEntry
from controlplane.nodes.models import EngineNode, NodeCommand, Pool
from controlplane.nodes.services.engine_nodes import node_create
from controlplane.nodes.services.pools import pool_create, pool_publish
from controlplane.params.services.templates import template_create, template_version_create
from tests.engine_node import fleet
from tests.engine_node.fleet import FAST_PROFILE, AgentProcess, Traffic, wait_until
from tests.engine_node.test_fleet_degradation import Watch, assert_one_at_a_time, speculative_flag
from tests.live_server import Daphne

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.agents]

GOOD = FAST_PROFILE + "speculative:\n  acceptance_rate: 0.75\n"
# 15 % of draft tokens accepted: 85 % rejected, far above the report's 40 % line.
BAD = GOOD + "faults:\n  spec_acceptance_rate: 0.15\n"
# 1 s windows (10 s by default): the agent scrapes its engine once a second, so a window is one scrape's counters.
# The 12 s probe wait (300 s by default) outlasts the second node's drained restart on a busy machine, so that both
# are off (and the profile's drafts match again) before the first probes.
RULE = {
    "enabled": True,
    "method": "ngram",
    "num_speculative_tokens": 3,
    "window_s": 1,
    "backoff_windows": 3,
    "rejection_threshold": 0.4,
    "probe_after_s": 12,
    "resume_below_tokens_per_s": 100000,
}


def set_fault(agent: AgentProcess, rate) -> None:
    request = urllib.request.Request(
        f"{fleet.engine_url(agent)}/sim/faults",
        data=json.dumps({"spec_acceptance_rate": rate}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        assert response.status == 200


def commands(op: str, state: str | None = None):
    found = NodeCommand.objects.filter(op=op).select_related("node")
    return found.filter(state=state) if state else found


def explain_state(agents):
    def explain() -> str:
        rows = [f"{a.name}: {a.health().get('speculation')}" for a in agents]
        rows += [f"{c.node.name} {c.op} {c.state} {c.result[:200]}" for c in NodeCommand.objects.select_related("node")]
        return "\n".join(rows) + "\n" + fleet.log_tail(agents[0], 15)

    return explain


@pytest.fixture
def fleet_of_two(tmp_path, sre):
    profile = tmp_path / "spec.yaml"
    profile.write_text(GOOD)
    server = Daphne(tmp_path)
    server.start()
    pool = pool_create(actor=sre, name="staging", is_production=False)
    Pool.objects.filter(pk=pool.pk).update(canary_stages=[{"percent": 100}])
    agents = []
    for name in ("gpu-1", "gpu-2"):
        _, token = node_create(actor=sre, name=name, pool=pool)
        agents.append(
            AgentProcess(name=name, token=token, control_plane_url=server.ws_agent_url, work=tmp_path, profile=profile)
        )
    try:
        fleet.start_agents(agents)
        wait_until(lambda: EngineNode.objects.filter(is_connected=True).count() == 2, 30, "both agents to connect")
        yield {"pool": Pool.objects.get(pk=pool.pk), "agents": agents, "profile": profile}
    finally:
        fleet.stop_agents(agents)
        server.stop()


def test_sustained_rejection_turns_speculation_off_node_by_node_and_recovery_turns_it_back_on(fleet_of_two, sre):
    pool, agents, profile = fleet_of_two["pool"], fleet_of_two["agents"], fleet_of_two["profile"]
    explain = explain_state(agents)
    template = template_create(actor=sre, name="chat")
    document = {"inference_params": {"speculative": RULE, "max_tokens": {"whitelist": []}}}
    version = template_version_create(actor=sre, template=template, document=document, base_number=None)
    pool_publish(actor=sre, pool=pool, version=version, reason="speculate with n-grams")
    wait_until(lambda: EngineNode.objects.filter(applied_hash=version.content_hash).count() == 2, 60, "both ACKs")
    wait_until(lambda: all(a.health()["status"] == "online" for a in agents), 30, "both nodes online")

    with Traffic(agents) as traffic, Watch(agents) as watch:
        # Drafts accepted: windows close below the line and nothing happens.
        wait_until(
            lambda: all(len(a.health()["speculation"]["windows"]) >= 2 for a in agents), 20, "windows", explain=explain
        )
        for agent in agents:
            state = agent.health()["speculation"]
            assert state["state"] == "on" and state["rejected_windows"] == 0, state
            assert all(w["rejection"] < 0.4 for w in state["windows"] if w["rejection"] is not None), state
        assert speculative_flag(agents[0]) is not None

        # The traffic's drafts stop matching (kept across engine restarts by the profile).
        profile.write_text(BAD)
        for agent in agents:
            set_fault(agent, 0.15)
        wait_until(lambda: commands("speculation_off", "succeeded").count() == 2, 70, "both nodes off", explain=explain)
        wait_until(lambda: all(a.health()["status"] == "online" for a in agents), 30, "both nodes online again")
        for agent in agents:
            assert speculative_flag(agent) is None, f"{agent.name} still runs speculative decoding"
            assert agent.health()["speculation"]["state"] == "off"
        off = list(commands("speculation_off"))
        assert_one_at_a_time(off)
        assert {c.node.name for c in off} == {"gpu-1", "gpu-2"} and all(c.requested_by is None for c in off)
        assert all("consecutive 1 s windows" in c.reason for c in off), [c.reason for c in off]
        audits = AuditEntry.objects.filter(action="node.speculation_off")
        assert audits.count() == 2 and {a.actor_name for a in audits} == {"system"}
        assert all(a.after["figures"]["rejected_windows"] >= 3 for a in audits), [a.after for a in audits]
        wait_until(
            lambda: set(EngineNode.objects.values_list("speculation__state", flat=True)) == {"off"},
            10,
            "the node pages to show speculation off",
        )

        # The drafts match again: after the probe wait each node turns it back on, one at a time, and keeps it.
        profile.write_text(GOOD)
        wait_until(lambda: commands("speculation_on", "succeeded").count() == 2, 70, "both back on", explain=explain)
        wait_until(lambda: all(a.health()["status"] == "online" for a in agents), 30, "both nodes online again")
        for agent in agents:
            assert speculative_flag(agent) is not None, f"{agent.name} came back without speculative decoding"
        wait_until(
            lambda: all(a.health()["speculation"]["state"] == "on" for a in agents),
            20,
            "accepted windows to end the probes",
            explain=explain,
        )
        assert_one_at_a_time(commands("speculation_on"))
        assert AuditEntry.objects.filter(action="node.speculation_on", actor_name="system").count() == 2

    assert commands("speculation_off").count() == 2, "a probe failed or a node flapped"
    assert NodeCommand.objects.exclude(state="succeeded").count() == 0
    assert traffic.outcomes[200] > 0, (traffic.outcomes, traffic.errors[:5])
    assert traffic.failed == 0, (traffic.outcomes, traffic.errors[:5])
    assert all({"draining", "restarting"} & seen for seen in watch.statuses.values()), watch.statuses
    assert watch.overlaps == 0, f"{watch.overlaps} polls saw neither node online"
    print(f"speculation rule: {traffic.outcomes[200]} requests served during 4 drained restarts, none failed")


def test_a_stand_alone_node_turns_speculation_off_by_itself(tmp_path):
    """No control plane, so no lease: the node restarts drained on its own, and no request fails."""
    from controlplane.params.schema import effective
    from engine_node.config import NodeConfig, content_hash
    from engine_node.state import LastGoodStore

    profile = tmp_path / "spec.yaml"
    profile.write_text(BAD)
    content = effective({"speculative": RULE, "max_tokens": {"whitelist": []}})
    agent = AgentProcess(name="solo", control_plane_url=None, work=tmp_path, profile=profile)
    LastGoodStore(agent.state_dir).save(
        NodeConfig.from_message({"version": None, "hash": content_hash(content), "content": content})
    )
    agent.start()
    try:
        wait_until(lambda: agent.health()["status"] == "online", 30, "the node online")
        assert speculative_flag(agent) is not None
        with Traffic([agent]) as traffic:
            wait_until(
                lambda: agent.health()["speculation"]["state"] == "off" and agent.health()["status"] == "online",
                40,
                "the node to turn speculation off",
                explain=lambda: str(agent.health().get("speculation")) + "\n" + fleet.log_tail(agent, 10),
            )
        assert speculative_flag(agent) is None
        assert "consecutive 1 s windows" in agent.health()["speculation"]["last_change"]
        assert traffic.outcomes[200] > 0 and traffic.failed == 0, (traffic.outcomes, traffic.errors[:5])
    finally:
        agent.stop()
