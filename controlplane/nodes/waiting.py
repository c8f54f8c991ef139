"""Why a node does not run its pool's desired version yet, in words: what the fleet, node and pool pages show.

One code and one line of text per node, the first that applies:

- `never_connected`: its agent never connected;
- `offline`: lost (no live connection, or no heartbeat for NODE_LOST_AFTER_S); it is sent the version on reconnect;
- `nacked`: it refused the version it should run, with its error;
- `canary`: a canary rollout runs and no stage has reached the node yet: it keeps the previous version;
- `degraded`, `warming`, `applying`: its engine is failing, or it is warming up / draining / restarting for a config;
- `rolling_back`, `waiting_for_ack`: the version was sent (by a rollback, or a publish) and no ACK has come yet.
"""

from datetime import datetime

from controlplane.lib.when import clock
from controlplane.nodes.models import EngineNode, Pool, PoolRelease, Rollout


class PoolContext:
    """What the reasons of one pool's nodes share, read once and only when a node is out of sync."""

    def __init__(self, pool: Pool):
        self.pool = pool
        self._loaded = False
        self.rollout: Rollout | None = None
        self.release: PoolRelease | None = None

    def load(self) -> "PoolContext":
        if not self._loaded:
            self.rollout = (
                Rollout.objects.filter(pool_id=self.pool.pk, state__in=Rollout.ACTIVE)
                .select_related("from_version__template", "to_version__template")
                .first()
            )
            self.release = PoolRelease.objects.filter(pool_id=self.pool.pk).first()
            self._loaded = True
        return self


def node_sync_reason(*, node: EngineNode, now: datetime, context: PoolContext | None = None) -> tuple[str, str]:
    """(code, text) saying why the node's applied version is not the pool's desired one; ("", "") when it is, or
    when the pool has no desired version."""
    desired = node.pool.desired_version
    if desired is None or node.applied_hash == desired.content_hash:
        return "", ""
    if node.connected_at is None and node.last_seen_at is None:
        return "never_connected", f"not connected yet: its agent gets {desired} when it first connects"
    context = (context or PoolContext(node.pool)).load()
    rollout = context.rollout
    target = desired
    if rollout is not None and node.name not in rollout.canary_nodes:
        target = rollout.from_version
    if node.is_lost(now):
        seen = f" since {clock(node.last_seen_at)}" if node.last_seen_at else ""
        return "offline", f"offline{seen}: it is sent {target} when it reconnects"
    if node.last_nack_hash == target.content_hash:
        return "nacked", f"NACKed {target}: {node.last_nack_error[:500]}"
    if target != desired and node.applied_hash == target.content_hash:
        stage = f"stage {rollout.stage_index + 1} of {len(rollout.stages)}"
        return (
            "canary",
            f"canary: not in this stage ({stage} runs {desired} on {len(rollout.canary_nodes)} node(s)); "
            f"it keeps {target} until a stage reaches it",
        )
    status = node.reported_status
    if status == EngineNode.Status.DEGRADED:
        return "degraded", f"its engine is degraded (crashed or failed to start); {target} is applied once it serves"
    if status == EngineNode.Status.WARMING or node.warmup_state == EngineNode.WarmupState.RUNNING:
        progress = node.warmup_progress or {}
        counted = "done" in progress and "total" in progress
        done = f" ({progress['done']}/{progress['total']} requests)" if counted else ""
        return "warming", f"warming up{done}: it ACKs {target} once the warmup check passes"
    if status in {EngineNode.Status.DRAINING, EngineNode.Status.RESTARTING}:
        return "applying", f"applying {target}: {status} the engine for a cold change"
    release = context.release
    sent = f" (sent {clock(release.created_at)})" if release is not None else ""
    if release is not None and release.kind == PoolRelease.Kind.ROLLBACK and release.version_id == target.pk:
        return "rolling_back", f"rolling back to {target}: waiting for its ACK{sent}"
    return "waiting_for_ack", f"waiting for its ACK of {target}{sent}"
