"""Builders for domain objects, going through the services so invariants and audit hold."""

from datetime import timedelta

from controlplane.nodes.models import EngineNode
from controlplane.nodes.services import agent_sessions
from controlplane.nodes.services.pools import pool_create
from controlplane.nodes.services.version_runs import version_runs_watch
from controlplane.params.services.templates import template_create, template_version_create
from controlplane.params.services.whitelists import whitelist_create


def legal_whitelist(actor):
    return whitelist_create(actor=actor, name="legal", scenarios=["legal", "legal_policy"])


def template_with_versions(actor, name="chat", temperatures=(0.3,)):
    """A template whose version i sets temperature.strict to temperatures[i]."""
    template = template_create(actor=actor, name=name)
    versions = []
    for i, strict in enumerate(temperatures):
        document = {"inference_params": {"temperature": {"strict": strict}, "max_tokens": {"whitelist": []}}}
        versions.append(
            template_version_create(
                actor=actor, template=template, document=document, base_number=i or None, comment=f"v{i + 1}"
            )
        )
    return template, versions


def pools(actor):
    return (
        pool_create(actor=actor, name="staging", is_production=False),
        pool_create(actor=actor, name="prod-main", is_production=True),
    )


def ran_healthy(node: EngineNode, version) -> EngineNode:
    """`node` (of a non-production pool) connects, ACKs `version` and runs it healthy for its pool's soak window:
    it heartbeats until the window's end, when the gate's watch looks at it. The version then counts as run."""
    agent_sessions.node_hello(node_id=node.pk, session_id=f"{node.name}-session", hello={"status": "online"})
    agent_sessions.nodes_config_acked(node_ids=[node.pk], content_hash=version.content_hash, version_id=version.pk)
    node = EngineNode.objects.select_related("pool").get(pk=node.pk)
    end = node.applied_at + timedelta(seconds=node.pool.soak_s)
    EngineNode.objects.filter(pk=node.pk).update(last_seen_at=end)
    version_runs_watch(now=end)
    return node
