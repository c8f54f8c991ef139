"""Two control-plane processes (daphne) on one Postgres and one Redis, agents given both URLs.

The agents spread over the two processes (by a hash of their names: gpu-1..3 start on the first URL, gpu-4 on the
second) and each process's pool figures cover all four nodes (the latest samples are shared through Redis). SIGKILL
one under traffic: no user request fails (the gateway does not go
through the control plane), every node it held says hello to the survivor within 10 s and is reconciled there, and a
publish made after the kill reaches every node through the survivor (its ACKs stored, none lost).
"""

import re

import pytest
from django.utils import timezone

from controlplane.metrics.models import MetricSample
from controlplane.nodes.models import EngineNode, Pool
from controlplane.nodes.services.engine_nodes import node_create
from controlplane.nodes.services.pools import pool_create, pool_publish
from controlplane.params.services.templates import template_create, template_version_create
from tests.engine_node.fleet import FAST_PROFILE, AgentProcess, Traffic, log_tail, start_agents, stop_agents, wait_until
from tests.live_server import daphnes

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.agents]

NODES = 4
CONNECTED = re.compile(r"connected to the control plane at (\S+)")


def document(**sections) -> dict:
    return {"inference_params": {"max_tokens": {"whitelist": []}, **sections}}


def on_url(agent: AgentProcess) -> str | None:
    """The URL the agent last connected to, from its log."""
    found = CONNECTED.findall(agent.log_path.read_text(errors="replace"))
    return found[-1] if found else None


def nodes_on(version) -> list[str]:
    return sorted(
        EngineNode.objects.filter(applied_hash=version.content_hash, is_connected=True).values_list("name", flat=True)
    )


def pool_rows_cover(nodes: int, since) -> bool:
    """A pool row stored after `since` counts `nodes` nodes (whichever process wrote it)."""
    rows = MetricSample.objects.filter(scope="pool", name="staging", resolution_s=1, t__gte=since)
    return any(row.values.get("nodes") == nodes for row in rows)


def explain(agents) -> str:
    nodes = EngineNode.objects.order_by("name")
    rows = [f"{n.name}: connected={n.is_connected} applied={n.applied_hash[:12]}" for n in nodes]
    return "\n".join(rows + [f"--- {a.name} on {on_url(a)}\n{log_tail(a, 15)}" for a in agents])


@pytest.fixture
def two_processes(tmp_path, sre):
    profile = tmp_path / "fast.yaml"
    profile.write_text(FAST_PROFILE)
    with daphnes(tmp_path, 2) as servers:
        pool = pool_create(actor=sre, name="staging", is_production=False)
        Pool.objects.filter(pk=pool.pk).update(canary_stages=[{"percent": 100}])
        template = template_create(actor=sre, name="chat")
        urls = ",".join(server.ws_agent_url for server in servers)
        agents = []
        for i in range(1, NODES + 1):
            node, token = node_create(actor=sre, name=f"gpu-{i}", pool=pool)
            agents.append(
                AgentProcess(name=node.name, token=token, control_plane_url=urls, work=tmp_path, profile=profile)
            )
        try:
            start_agents(agents)
            wait_until(
                lambda: EngineNode.objects.filter(is_connected=True).count() == NODES,
                30,
                "every agent to connect",
                explain=lambda: explain(agents),
            )
            yield {"servers": servers, "pool": Pool.objects.get(pk=pool.pk), "template": template, "agents": agents}
        finally:
            stop_agents(agents)


def test_killing_one_process_loses_no_request_and_its_nodes_reconcile_on_the_survivor(two_processes, sre):
    servers, pool, template, agents = (two_processes[k] for k in ("servers", "pool", "template", "agents"))
    v1 = template_version_create(actor=sre, template=template, document=document(), base_number=None)
    v2 = template_version_create(
        actor=sre, template=template, document=document(temperature={"strict": 0.2}), base_number=1
    )
    with Traffic(agents) as traffic:
        # A publish reaches the nodes of both processes (the push crosses processes through Redis).
        pool_publish(actor=sre, pool=pool, version=v1, reason="first")
        wait_until(lambda: len(nodes_on(v1)) == NODES, 30, "every node to ACK v1", explain=lambda: explain(agents))

        held = {server.ws_agent_url: [a.name for a in agents if on_url(a) == server.ws_agent_url] for server in servers}
        assert [len(names) for names in held.values()] == [3, 1], held
        # Each process receives the samples of its own agents only, yet the pool's figures cover all four nodes.
        since = timezone.now()
        wait_until(lambda: pool_rows_cover(NODES, since), 10, "a pool row covering the nodes of both processes")
        victim, survivor = servers
        moved = held[victim.ws_agent_url]
        victim.process.kill()  # SIGKILL: no disconnect handler runs, nothing is said to anyone
        victim.process.wait()
        victim.process = None

        # Every node it held says hello to the survivor within 10 s and is reconciled there.
        wait_until(
            lambda: all(on_url(a) == survivor.ws_agent_url for a in agents),
            10,
            "the killed process's nodes to connect to the survivor",
            explain=lambda: explain(agents),
        )
        wait_until(
            lambda: EngineNode.objects.filter(is_connected=True).count() == NODES,
            10,
            "every node to be connected",
            explain=lambda: explain(agents),
        )

        since = timezone.now()
        wait_until(lambda: pool_rows_cover(NODES, since), 10, "the survivor's pool rows to cover every node")

        # A publish after the kill reaches every node through the survivor; every ACK is stored.
        pool_publish(actor=sre, pool=Pool.objects.get(pk=pool.pk), version=v2, reason="after the failover")
        wait_until(lambda: len(nodes_on(v2)) == NODES, 30, "every node to ACK v2", explain=lambda: explain(agents))
    assert traffic.outcomes[200] > 0, (traffic.outcomes, traffic.errors[:5])
    assert traffic.failed == 0, (traffic.outcomes, traffic.errors[:5])
    for agent in agents:
        assert agent.health()["applied"] == "chat v2"
    node = EngineNode.objects.get(name=moved[0])
    assert node.is_connected and node.applied_hash == v2.content_hash
