"""A control plane on daphne and a staging pool whose simulator agents serve one template version: the setting of
the fleet tests that watch one pool's live figures (detectors, intent drift, the review loop)."""

import contextlib

from controlplane.nodes.models import EngineNode
from controlplane.nodes.services.engine_nodes import node_create
from controlplane.nodes.services.pools import pool_create, pool_publish
from controlplane.params.services.templates import template_create, template_version_create
from tests.engine_node.fleet import AgentProcess, start_agents, stop_agents, wait_until
from tests.live_server import daphnes


@contextlib.contextmanager
def served_pool(
    tmp_path, sre, *, document: dict, profile: str, nodes=("sim-1",), reason: str = "fleet test", processes: int = 1
):
    """Yields (agents, pool, server) once every node ACKed the version built from `document`; stops them all after.
    `server` is the first daphne process (its `url` serves the dashboard too). With `processes` > 1 the nodes are
    dealt over that many daphne processes on the same Postgres and Redis, in turn (the first node to the first)."""
    profile_path = tmp_path / "profile.yaml"
    profile_path.write_text(profile)
    agents: list[AgentProcess] = []
    with daphnes(tmp_path, processes) as servers:
        try:
            pool = pool_create(actor=sre, name="staging", is_production=False)
            template = template_create(actor=sre, name="chat")
            version = template_version_create(actor=sre, template=template, document=document, base_number=None)
            for i, name in enumerate(nodes):
                _, token = node_create(actor=sre, name=name, pool=pool)
                url = servers[i % processes].ws_agent_url
                agents.append(
                    AgentProcess(name=name, token=token, control_plane_url=url, work=tmp_path, profile=profile_path)
                )
            start_agents(agents)
            pool_publish(actor=sre, pool=pool, version=version, reason=reason)
            wait_until(
                lambda: EngineNode.objects.filter(applied_hash=version.content_hash).count() == len(nodes),
                60,
                "every node's ACK",
            )
            yield agents, pool, servers[0]
        finally:
            stop_agents(agents)
