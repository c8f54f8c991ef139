"""Audited writes to engine nodes by people: registration, credentials, and operations."""

from django.db import IntegrityError, transaction
from django.utils import timezone

from controlplane.audit.services import audit_record, mutating_service
from controlplane.lib.errors import Conflict, InvalidField, check_slug, required_text
from controlplane.nodes import realtime, tokens
from controlplane.nodes.models import EngineNode, NodeCommand, Pool
from controlplane.nodes.services import cleanup


@mutating_service
def node_create(*, actor, name: str, pool: Pool, description: str = "") -> tuple[EngineNode, str]:
    """Register a node in a pool and issue its first token; the token is returned once, never stored."""
    check_slug("name", name)
    token = tokens.token_generate()
    with transaction.atomic():
        try:
            with transaction.atomic():
                node = EngineNode.objects.create(
                    name=name,
                    pool=pool,
                    description=description,
                    token_hash=tokens.token_hash(token),
                    token_prefix=token[:12],
                    token_issued_at=timezone.now(),
                )
        except IntegrityError:
            raise Conflict(f"name: a node named {name!r} already exists") from None
        audit_record(actor=actor, action="node.create", target=node, after={"name": name, "pool": pool.name})
    return node, token


@mutating_service
def node_token_rotate(*, actor, node: EngineNode, reason: str) -> str:
    """Issue a new token; the old one stops working and its live connection is closed."""
    reason = required_text("reason", reason)
    token = tokens.token_generate()
    with transaction.atomic():
        locked = EngineNode.objects.select_for_update().get(pk=node.pk)
        before = {"token_prefix": locked.token_prefix}
        locked.token_hash = tokens.token_hash(token)
        locked.token_prefix = token[:12]
        locked.token_issued_at = timezone.now()
        locked.token_revoked_at = None
        locked.save(update_fields=["token_hash", "token_prefix", "token_issued_at", "token_revoked_at"])
        audit_record(
            actor=actor,
            action="node.token_rotate",
            target=locked,
            before=before,
            after={"token_prefix": locked.token_prefix},
            reason=reason,
        )
        transaction.on_commit(lambda: realtime.node_revoked(locked.pk))
    return token


@mutating_service
def node_token_revoke(*, actor, node: EngineNode, reason: str) -> EngineNode:
    """Revoke the node's token now: its connection closes and it cannot reconnect until a new token is issued."""
    reason = required_text("reason", reason)
    with transaction.atomic():
        locked = EngineNode.objects.select_for_update().get(pk=node.pk)
        if not locked.token_hash:
            raise Conflict(f"node: {locked.name} has no active token")
        before = {"token_prefix": locked.token_prefix}
        locked.token_hash = ""
        locked.token_revoked_at = timezone.now()
        locked.save(update_fields=["token_hash", "token_revoked_at"])
        audit_record(actor=actor, action="node.token_revoke", target=locked, before=before, reason=reason)
        transaction.on_commit(lambda: realtime.node_revoked(locked.pk))
    return locked


@mutating_service
def node_command_request(*, actor, node: EngineNode, op: str, reason: str) -> NodeCommand:
    """Ask a connected node to restart its engine, drain, resume or clean up its memory; progress comes back from
    the agent. A cleanup waits its turn in the pool (controlplane/nodes/services/cleanup.py)."""
    reason = required_text("reason", reason)
    if op not in NodeCommand.Op.values:
        raise InvalidField("op", f"must be one of {', '.join(NodeCommand.Op.values)}; got {op!r}")
    if op == NodeCommand.Op.CLEANUP:
        return cleanup.node_cleanup_request(actor=actor, node=node, reason=reason)
    with transaction.atomic():
        locked = EngineNode.objects.select_for_update().get(pk=node.pk)
        if locked.is_lost(timezone.now()):
            raise Conflict(f"node: {locked.name} is not connected; the command could not reach it")
        if locked.commands.filter(state__in=[NodeCommand.State.PENDING, NodeCommand.State.RUNNING]).exists():
            raise Conflict(f"node: {locked.name} is still carrying out an earlier command")
        command = NodeCommand.objects.create(
            node=locked, op=op, requested_by=actor, reason=reason, sent_at=timezone.now()
        )
        audit_record(actor=actor, action=f"node.{op}", target=locked, after={"command": command.pk}, reason=reason)
        transaction.on_commit(lambda: realtime.node_command(command))
        transaction.on_commit(lambda: realtime.node_command_changed(command))
    return command
