"""The speculative-decoding rule's restarts, one node of a pool at a time.

A node's agent (engine_node/speculation.py) asks to turn speculative decoding off after sustained draft rejection,
or back on (a probe) when generation is slow; either is a drained engine restart. Like a node's own memory cleanup
(cleanup.py), the request is granted as a command sent to the node only while no other node of its pool restarts
for this rule, cleans up or restarts on an operator's command; the decision is taken under a row lock on the Pool.
A grant is written to the audit log as the system's action, with the node's figures; a refusal changes nothing and
the node asks again later. A lease whose end is never reported expires after LEASE_S or when the node is lost.
"""

import math
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from controlplane.audit.services import audit_record
from controlplane.nodes import realtime
from controlplane.nodes.models import EngineNode, NodeCommand, Pool

# A drained restart waits for in-flight requests (the agent's drain timeout), starts the engine and warms it up.
LEASE_S = 600
OPS = {"off": NodeCommand.Op.SPECULATION_OFF, "on": NodeCommand.Op.SPECULATION_ON}
# Commands that take a node of the pool out of service: while one runs, no other node may start one of these.
RESTARTING_OPS = (
    NodeCommand.Op.SPECULATION_OFF,
    NodeCommand.Op.SPECULATION_ON,
    NodeCommand.Op.CLEANUP,
    NodeCommand.Op.RESTART,
)
_UNFINISHED = [NodeCommand.State.PENDING, NodeCommand.State.RUNNING]
REPORTED_KEYS = ("state", "rejected_windows", "backoff_windows", "off_for_s", "probe_after_s", "tokens_per_s",
                 "last_change")  # fmt: skip


def reported_speculation(value) -> dict | None:
    """The agent's report of its rule: only the known keys, plain values, text bounded; None if not a mapping."""
    if not isinstance(value, dict):
        return None
    kept = {}
    for key in REPORTED_KEYS:
        if key not in value:
            continue
        item = value[key]
        if isinstance(item, str):
            kept[key] = item[:500]
        elif item is None or (isinstance(item, int | float) and not isinstance(item, bool) and math.isfinite(item)):
            kept[key] = item
    return kept


def speculation_restarts(pool: Pool):
    """The pool's speculation commands not finished yet."""
    return NodeCommand.objects.select_related("node").filter(
        node__pool=pool, op__in=list(OPS.values()), finished_at__isnull=True
    )


def _expire(pool: Pool, now) -> None:
    for command in speculation_restarts(pool).filter(sent_at__isnull=False):
        if command.node.is_lost(now):
            result = "lease ended: the node was lost during its restart"
        elif command.sent_at < now - timedelta(seconds=LEASE_S):
            result = "lease expired: the node never reported the end of its restart"
        else:
            continue
        command.state, command.result, command.finished_at = NodeCommand.State.FAILED, result, now
        command.save(update_fields=["state", "result", "finished_at"])
        transaction.on_commit(lambda command=command: realtime.node_command_changed(command))


def speculation_lease_request(*, node_id: int, action: str, reason: str, state=None) -> tuple[NodeCommand | None, str]:
    """A node's rule asks for speculative decoding `action` ("off" or "on"): granted as a command sent to it when
    no other node of its pool is restarting or cleaning up, else refused with the reason."""
    if not isinstance(action, str) or action not in OPS:
        return None, f"action: must be off or on, got {str(action)[:20]!r}"
    reason = str(reason or "").strip()[:1000] or f"speculative decoding {action}"
    figures = reported_speculation(state) or {}
    now = timezone.now()
    with transaction.atomic():
        node = EngineNode.objects.get(pk=node_id)
        pool = Pool.objects.select_for_update().get(pk=node.pool_id)
        _expire(pool, now)
        if node.commands.filter(state__in=_UNFINISHED).exists():
            return None, "this node is still carrying out an earlier command"
        other = (
            NodeCommand.objects.select_related("node")
            .filter(node__pool=pool, op__in=RESTARTING_OPS, finished_at__isnull=True)
            .exclude(node=node)
            .order_by("requested_at")
            .first()
        )
        if other is not None:
            return None, f"{other.node.name} of pool {pool.name} is out of service ({other.get_op_display().lower()})"
        command = NodeCommand.objects.create(
            node=node, op=OPS[action], requested_by=None, reason=f"automatic: {reason}", sent_at=timezone.now()
        )
        audit_record(
            actor=None,
            action=f"node.speculation_{action}",
            target=node,
            after={"command": command.pk, "figures": figures},
            reason=command.reason,
        )
        transaction.on_commit(lambda: realtime.node_command(command))
        transaction.on_commit(lambda: realtime.node_command_changed(command))
    return command, ""
