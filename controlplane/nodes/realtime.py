"""Events about pools and nodes: releases and node changes to browsers, config, bundles and commands to agents."""

import json

from controlplane.lib import realtime
from controlplane.lib.realtime import version_ref
from controlplane.nodes.selectors import command_summary
from controlplane.operations.policy_bundle import push_policy


def config_message(version) -> realtime.ConfigPush:
    """The xDS-like push: version, hash of the content, and the content: the effective parameters with the model
    catalog entries they name under `models` (TemplateVersion.node_content).

    `text` is the agent-facing JSON, encoded once here rather than once per connected agent.
    """
    ref, content_hash = version_ref(version), version.content_hash
    agent_message = {"type": "config", "version": ref, "hash": content_hash, "content": version.node_content}
    return {
        "type": "config.push",
        "version_id": version.pk,
        "version": ref,
        "hash": content_hash,
        "text": json.dumps(agent_message, ensure_ascii=False),
    }


def pool_released(release, node_ids: list[int] | None = None) -> None:
    """Browsers hear of the release; the pool's agents (or, for a canary stage, only `node_ids`) get the config."""
    event: realtime.PoolReleased = {
        "type": "pool.released",
        "pool": release.pool.name,
        "kind": release.kind,
        "version": version_ref(release.version),
        "previous_version": version_ref(release.previous_version),
        "actor": release.actor_name,
        "reason": release.reason,
        "at": release.created_at.isoformat(),
    }
    realtime.send([realtime.fleet_group(), realtime.pool_group(release.pool.name)], event)
    if node_ids is None:
        realtime.send([realtime.agents_group(release.pool.name)], config_message(release.version))
    else:
        config_to_nodes(node_ids, release.version)
    policy_to_pool(release.pool)


def policy_to_pool(pool) -> None:
    """A production pool's nodes use the whitelist versions of the release they run: its bundle follows releases
    and canary stages (a non-production pool's follows whitelist edits instead, and does not change here)."""
    if pool.is_production:
        push_policy([pool])


def config_to_nodes(node_ids: list[int], version) -> None:
    """A canary stage's push: only these nodes' connections get the version."""
    message = config_message(version)
    realtime.send([realtime.node_group(node_id) for node_id in node_ids], message)


def rollout_updated(summary: dict) -> None:
    event: realtime.RolloutUpdated = {"type": "rollout.updated", "rollout": summary}
    realtime.send([realtime.pool_group(summary["pool"])], event)


def node_command(command) -> None:
    event: realtime.NodeCommandEvent = {"type": "node.command", "id": command.pk, "op": command.op}
    realtime.send([realtime.node_group(command.node_id)], event)


def node_command_changed(command) -> None:
    """A command was asked for, sent, progressed or ended: to the browsers watching its pool."""
    summary = command_summary(command=command)
    event: realtime.NodeCommandChanged = {"type": "node.command_changed", "command": summary}
    realtime.send([realtime.pool_group(summary["pool"])], event)


def node_revoked(node_id: int) -> None:
    realtime.send([realtime.node_group(node_id)], {"type": "node.revoke"})


def node_updated(summary: dict) -> None:
    event: realtime.NodeUpdated = {"type": "node.updated", "node": summary}
    realtime.send([realtime.fleet_group(), realtime.pool_group(summary["pool"])], event)


async def nodes_acked(acks) -> None:
    """One `nodes.updated` per pool for a batch of ACKs; each entry is partial and browsers merge it."""
    by_pool: dict[str, list[dict]] = {}
    for ack in acks:
        by_pool.setdefault(ack.pool, []).append(
            {
                "name": ack.node,
                "pool": ack.pool,
                "applied": ack.version,
                "in_sync": ack.in_sync,
                "nacked_desired": False,
                "last_nack_error": "",
                # Only an ACK of the desired version says the node has nothing left to wait for; after another ACK
                # (an older push), the reason browsers show stays until the node's next full update.
                **({"sync_code": "", "sync_reason": ""} if ack.in_sync else {}),
            }
        )
    for pool, nodes in by_pool.items():
        event: realtime.NodesUpdated = {"type": "nodes.updated", "nodes": nodes}
        await realtime.send_async([realtime.fleet_group(), realtime.pool_group(pool)], event)
