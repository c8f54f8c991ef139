"""Why a node does not run its pool's desired version yet, in words: what the fleet, node and pool pages show.

One code and one line of text per node, the first that applies:

- `never_connected`: its agent never connected;
- `offline`: lost (no live connection, or no heartbeat for NODE_LOST_AFTER_S); it is sent the version on reconnect;
- `nacked`: it refused the version it should run, with its error;
- `canary`: a canary rollout runs and no stage has reached the node yet: it keeps the previous version;
- `degraded`, `warming`, `applying`: its engine is failing, or it is warming up / draining / restarting for a config;
- `rolling_back`, `waiting_for_ack`: the version was sent (by a rollback, or a publish) and no ACK has come yet.

And what a node command (a cleanup above all) and a rollout stage wait for: reads, shared by the selectors and the
services that change commands and rollouts.
"""

from datetime import datetime, timedelta

from django.db.models import Q

from controlplane.lib.when import clock
from controlplane.metrics.samples import sample_window_s
from controlplane.nodes.models import EngineNode, NodeCommand, Pool, PoolRelease, Rollout
from controlplane.params.schema import FIELDS_BY_PATH


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


# --- commands and rollouts ---------------------------------------------------------------------------------

# A cleanup lease outlives the cleanup's own bound by this much before the next node's turn (services/cleanup.py).
LEASE_GRACE_S = 30


def cleanups_unfinished(pool: Pool):
    return NodeCommand.objects.select_related("node").filter(
        node__pool=pool, op=NodeCommand.Op.CLEANUP, finished_at__isnull=True
    )


def cleanup_max_duration_s(node: EngineNode) -> int:
    """The node's bound on a cleanup: from the version it runs, else its pool's desired one, else the default."""
    for version in (node.applied_version, node.pool.desired_version):
        if version is not None:
            return int(version.effective_params["cleanup"]["max_duration_s"])
    return int(FIELDS_BY_PATH["cleanup.max_duration_s"].default)


def cleanup_waiting_for(*, command: NodeCommand, now) -> str:
    """What a cleanup that has not started yet waits for, in words; empty once the node carries it out."""
    node = command.node
    if command.state != NodeCommand.State.PENDING or command.finished_at is not None:
        return ""
    if command.sent_at is not None:
        return sent_waiting_for(command=command, now=now)
    if node.is_lost(now):
        return (
            f"waiting for {node.name} to reconnect (offline); it is dropped if the node is still offline "
            "when its turn comes"
        )
    pool = node.pool
    holder = (
        cleanups_unfinished(pool)
        .filter(sent_at__isnull=False)
        .exclude(pk=command.pk)
        .select_related("node__applied_version", "node__pool__desired_version")
        .order_by("sent_at")
        .first()
    )
    ahead = list(
        cleanups_unfinished(pool)
        .filter(sent_at__isnull=True)
        .filter(Q(requested_at__lt=command.requested_at) | Q(requested_at=command.requested_at, pk__lt=command.pk))
        .order_by("requested_at", "id")
    )
    queue = f"; {len(ahead)} earlier cleanup(s) of the pool go first (next: {ahead[0].node.name})" if ahead else ""
    if holder is None:
        return "waiting to be sent: the pool's cleanup lease is free; the next dispatch pass (every 5 s) sends it" + (
            queue
        )
    bound = holder.sent_at + timedelta(seconds=cleanup_max_duration_s(holder.node) + LEASE_GRACE_S)
    doing = f": {holder.progress}" if holder.progress else f" ({holder.state})"
    return (
        f"waiting for the pool's cleanup lease, held by {holder.node.name} since {clock(holder.sent_at)}{doing}; "
        f"it ends when that cleanup does, by {clock(bound)} at the latest" + queue
    )


def sent_waiting_for(*, command: NodeCommand, now) -> str:
    """A command sent to its node that the node has not reported starting."""
    node = command.node
    text = f"sent at {clock(command.sent_at)}; waiting for {node.name} to start it"
    if node.is_lost(now):
        return text + " (the node is offline)"
    if command.progress:
        return text + f" ({command.progress})"
    if node.reported_status not in {EngineNode.Status.ONLINE, EngineNode.Status.STARTING}:
        return text + f" (the node is {node.reported_status})"
    return text


def window_left_s(rollout: Rollout, now: datetime) -> float | None:
    """Seconds until the stage's analysis, once its nodes have ACKed (their sample windows turn over, then the
    analysis window runs)."""
    if rollout.stage_acked_at is None:
        return None
    end = rollout.stage_acked_at + timedelta(seconds=sample_window_s() + rollout.pool.analysis_window_s)
    return max(0.0, (end - now).total_seconds())
