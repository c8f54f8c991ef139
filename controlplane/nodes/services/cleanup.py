"""Memory cleanups, one node of a pool at a time: an SRE's node or pool cleanup, and a node's own request.

A cleanup is a NodeCommand with op `cleanup`. The pool's lease is simply "a cleanup command of this pool has been
sent and has not finished"; every decision about it is taken under a row lock on the Pool, so two nodes of one pool
are never granted at once. Waiting cleanups (`sent_at` empty: a pool cleanup's later nodes, or a node's cleanup
asked for while another node cleans up) are sent in order as each one ends. A node cleans up for at most its
template's `cleanup.max_duration_s` (the agent resumes past it), so a lease whose end was never reported expires
after that plus a grace period, or as soon as the node is lost.
"""

from datetime import timedelta

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from controlplane.audit.services import audit_record, mutating_service
from controlplane.impact import hooks as impact_hooks
from controlplane.lib.errors import Conflict, required_text
from controlplane.nodes import realtime
from controlplane.nodes.models import EngineNode, NodeCommand, Pool
from controlplane.nodes.waiting import LEASE_GRACE_S, cleanup_max_duration_s, cleanups_unfinished

_UNFINISHED = [NodeCommand.State.PENDING, NodeCommand.State.RUNNING]


def _speculation_restarts(pool: Pool):
    """The speculative-decoding rule's restarts under way in the pool (services/speculation.py): a node out of
    service too, so no cleanup starts beside one."""
    return NodeCommand.objects.select_related("node").filter(
        node__pool=pool,
        op__in=[NodeCommand.Op.SPECULATION_OFF, NodeCommand.Op.SPECULATION_ON],
        finished_at__isnull=True,
        sent_at__isnull=False,
    )


def _finish(command: NodeCommand, *, result: str, now) -> None:
    command.state = NodeCommand.State.FAILED
    command.result = result
    command.finished_at = now
    command.save(update_fields=["state", "result", "finished_at"])
    transaction.on_commit(lambda: realtime.node_command_changed(command))


def _expire(pool: Pool, now) -> None:
    """Fail the sent cleanups whose node was lost or that outlived their bound: their lease is over."""
    for command in (
        cleanups_unfinished(pool)
        .filter(sent_at__isnull=False)
        .select_related("node__applied_version", "node__pool__desired_version")
    ):
        bound = timedelta(seconds=cleanup_max_duration_s(command.node) + LEASE_GRACE_S)
        if command.node.is_lost(now):
            _finish(command, result="lease ended: the node was lost during its cleanup", now=now)
        elif command.sent_at < now - bound:
            _finish(command, result="lease expired: the node never reported the end of its cleanup", now=now)


def _dispatch_next(pool: Pool, now) -> NodeCommand | None:
    """Send the pool's oldest waiting cleanup unless another one is under way; the caller holds the pool lock."""
    _expire(pool, now)
    if cleanups_unfinished(pool).filter(sent_at__isnull=False).exists() or _speculation_restarts(pool).exists():
        return None
    for command in cleanups_unfinished(pool).filter(sent_at__isnull=True).order_by("requested_at", "id"):
        if command.node.is_lost(now):
            _finish(command, result="not sent: the node was not connected when its turn came", now=now)
            continue
        # Stamped now, under the pool's lock: a caller's `now` may predate the lock it waited for, and with it the
        # end of the command that held the lease (the order the one-at-a-time rule is read by).
        command.sent_at = timezone.now()
        command.save(update_fields=["sent_at"])
        transaction.on_commit(lambda command=command: realtime.node_command(command))
        # Browsers: this one is sent now, and the ones behind it wait for another node.
        for changed in cleanups_unfinished(pool).filter(Q(pk=command.pk) | Q(sent_at__isnull=True)):
            transaction.on_commit(lambda changed=changed: realtime.node_command_changed(changed))
        return command
    return None


def _locked_pool(pool_id: int) -> Pool:
    return Pool.objects.select_for_update().get(pk=pool_id)


def _check_ready(node: EngineNode, now) -> None:
    if node.is_lost(now):
        raise Conflict(f"node: {node.name} is not connected; the command could not reach it")
    if node.commands.filter(state__in=_UNFINISHED).exists():
        raise Conflict(f"node: {node.name} is still carrying out an earlier command")


@mutating_service
def node_cleanup_request(*, actor, node: EngineNode, reason: str) -> NodeCommand:
    """Ask a node to clean up its memory; it starts at once, or when the pool's current cleanup ends."""
    reason = required_text("reason", reason)
    now = timezone.now()
    with transaction.atomic():
        pool = _locked_pool(node.pool_id)
        locked = EngineNode.objects.select_for_update().get(pk=node.pk)
        _check_ready(locked, now)
        command = NodeCommand.objects.create(node=locked, op=NodeCommand.Op.CLEANUP, requested_by=actor, reason=reason)
        audit_record(actor=actor, action="node.cleanup", target=locked, after={"command": command.pk}, reason=reason)
        impact_hooks.cleanup(pool=pool, nodes=[locked.name], actor=actor, reason=reason, command_ids=[command.pk])
        transaction.on_commit(lambda: realtime.node_command_changed(command))
        _dispatch_next(pool, now)
    command.refresh_from_db()
    return command


@mutating_service
def pool_cleanup_request(*, actor, pool: Pool, reason: str) -> list[NodeCommand]:
    """Clean up every connected, idle node of the pool, one node after the other."""
    reason = required_text("reason", reason)
    now = timezone.now()
    with transaction.atomic():
        locked_pool = _locked_pool(pool.pk)
        nodes = list(EngineNode.objects.select_for_update().filter(pool=locked_pool).order_by("name"))
        busy = set(NodeCommand.objects.filter(node__in=nodes, state__in=_UNFINISHED).values_list("node_id", flat=True))
        ready = [n for n in nodes if not n.is_lost(now) and n.pk not in busy]
        if not ready:
            raise Conflict(f"pool: {locked_pool.name} has no connected node free to clean up")
        commands = [
            NodeCommand.objects.create(node=n, op=NodeCommand.Op.CLEANUP, requested_by=actor, reason=reason)
            for n in ready
        ]
        skipped = sorted(n.name for n in nodes if n not in ready)
        audit_record(
            actor=actor,
            action="pool.cleanup",
            target=locked_pool,
            after={"nodes": [n.name for n in ready], "commands": [c.pk for c in commands], "skipped": skipped},
            reason=reason,
        )
        impact_hooks.cleanup(
            pool=locked_pool,
            nodes=[n.name for n in ready],
            actor=actor,
            reason=reason,
            command_ids=[c.pk for c in commands],
        )
        for command in commands:
            transaction.on_commit(lambda command=command: realtime.node_command_changed(command))
        _dispatch_next(locked_pool, now)
    return commands


def cleanup_lease_request(*, node_id: int, trigger: str, fragmentation=None) -> tuple[NodeCommand | None, str]:
    """A node's own request to clean up (threshold or timer): granted as a cleanup command sent to it when its
    pool has no other cleanup under way or waiting, else refused with the reason (the node asks again later).

    The grant is written to the audit log as the system's action; a refusal changes nothing.
    """
    trigger = trigger if trigger in {"threshold", "timer"} else "automatic"
    now = timezone.now()
    with transaction.atomic():
        node = EngineNode.objects.select_related("pool").get(pk=node_id)
        pool = _locked_pool(node.pool_id)
        _expire(pool, now)
        if node.commands.filter(state__in=_UNFINISHED).exists():
            return None, "this node is still carrying out an earlier command"
        other = cleanups_unfinished(pool).order_by("sent_at", "requested_at").first()
        if other is not None:
            return None, f"{other.node.name} of pool {pool.name} is cleaning up or waiting to"
        restarting = _speculation_restarts(pool).first()
        if restarting is not None:
            return None, f"{restarting.node.name} of pool {pool.name} is restarting for its speculative-decoding rule"
        if trigger == "threshold" and isinstance(fragmentation, int | float):
            reason = f"automatic: memory fragmentation {fragmentation:.1%} above the template's threshold"
        elif trigger == "timer":
            reason = "automatic: the template's cleanup timer (cleanup.interval_s)"
        else:
            reason = f"automatic ({trigger})"
        command = NodeCommand.objects.create(
            node=node, op=NodeCommand.Op.CLEANUP, requested_by=None, reason=reason, sent_at=timezone.now()
        )
        audit_record(actor=None, action="node.cleanup", target=node, after={"command": command.pk}, reason=reason)
        impact_hooks.cleanup(pool=pool, nodes=[node.name], actor=None, reason=reason, command_ids=[command.pk])
        transaction.on_commit(lambda: realtime.node_command(command))
        transaction.on_commit(lambda: realtime.node_command_changed(command))
    return command, ""


def cleanup_dispatch_next(*, pool_id: int) -> NodeCommand | None:
    """After a cleanup ended (or its node went away): send the pool's next waiting cleanup, if any."""
    with transaction.atomic():
        return _dispatch_next(_locked_pool(pool_id), timezone.now())


def cleanups_dispatch_due() -> int:
    """The periodic pass: every pool with a cleanup under way or waiting has its lease checked (an overdue one
    expires) and its next cleanup sent if the lease is free. Returns how many were sent."""
    pool_ids = (
        NodeCommand.objects.filter(op=NodeCommand.Op.CLEANUP, finished_at__isnull=True)
        .values_list("node__pool_id", flat=True)
        .distinct()
    )
    return sum(cleanup_dispatch_next(pool_id=pool_id) is not None for pool_id in sorted(set(pool_ids)))
