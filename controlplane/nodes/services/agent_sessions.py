"""What agents report over their connection: hello, heartbeats, ACK/NACK, command and warmup progress.

These are the node's own telemetry, not changes made by a person, so they are not audited; every
change a browser should see is broadcast as `node.updated`.
"""

import ipaddress

from django.db import transaction
from django.db.models import Case, CharField, DateTimeField, F, TextField, Value, When
from django.utils import timezone

from controlplane.lib.gateway_addresses import GatewayRefused, gateway_url_checked
from controlplane.nodes import realtime, tokens
from controlplane.nodes.models import EngineNode, NodeCommand
from controlplane.nodes.selectors import node_desired_version, node_summary
from controlplane.nodes.services import cleanup, rollouts, version_runs
from controlplane.nodes.services.speculation import reported_speculation
from controlplane.params.models import TemplateVersion
from engine_node.engine import LOG_LINE_CHARS
from engine_node.policy.masking import mask

LOG_TAIL_LINES = 50
_STATUSES = set(EngineNode.Status.values) - {EngineNode.Status.LOST}


def node_authenticate(*, token: str) -> EngineNode | None:
    """The node whose current token this is, or None; the hash lookup leaks nothing about the token."""
    if not token.startswith(tokens.PREFIX):
        return None
    node = EngineNode.objects.select_related("pool").filter(token_hash=tokens.token_hash(token)).first()
    return node if node and tokens.token_matches(token, node.token_hash) else None


def node_hello(*, node_id: int, session_id: str, hello: dict, address: str = "") -> dict | None:
    """Record the agent's identity and applied config; return the config to push if it is not the desired one.

    `address` is where the node's WebSocket came from ("" when unknown): by default its gateway must be there."""
    now = timezone.now()
    applied_hash = str(hello.get("applied_hash") or "")
    with transaction.atomic():
        node = _locked(node_id)
        node.hostname = str(hello.get("hostname", ""))[:255]
        node.backend = str(hello.get("backend", ""))[:32]
        node.engine_version = str(hello.get("engine_version", ""))[:64]
        node.agent_version = str(hello.get("agent_version", ""))[:32]
        node.gpus = hello.get("gpus") if isinstance(hello.get("gpus"), list) else []
        node.agent_address = _ip_address(address)
        node.gateway_url, node.gateway_url_refused = _gateway_url(hello.get("gateway_url"), node.agent_address)
        node.served_model_name = _model_name(hello.get("served_model_name"))
        node.reported_status = _status(hello.get("status"), node.reported_status)
        node.is_connected = True
        node.session_id = session_id
        node.connected_at = node.last_seen_at = now
        if isinstance(hello.get("warmup"), dict):
            _record_warmup(node, hello["warmup"], now)
        node.speculation = reported_speculation(hello.get("speculation")) or {}
        if applied_hash != node.applied_hash:
            node.applied_hash = applied_hash
            node.applied_version = _version_by_hash(applied_hash, hello.get("applied_version"))
            node.applied_at = now
        node.save()
    _broadcast(node)
    # During a canary a node the stages have not reached yet keeps the previous version, also across reconnects.
    desired = node_desired_version(node=node)
    if desired is not None and desired.content_hash != applied_hash:
        return realtime.config_message(desired)
    return None


def node_heartbeat(*, node_id: int, heartbeat: dict) -> None:
    """Keep the node alive; broadcast only when something a person would see has changed."""
    node = EngineNode.objects.select_related("pool__desired_version__template", "applied_version__template").get(
        pk=node_id
    )
    status = _status(heartbeat.get("status"), node.reported_status)
    log_tail = heartbeat.get("log_tail")
    if isinstance(log_tail, list):
        # Masked again here: a node that skipped its own masking still shows no customer's phone or e-mail.
        log_tail = [mask(str(line), limit=LOG_LINE_CHARS) for line in log_tail[-LOG_TAIL_LINES:]]
    changed = status != node.reported_status or (isinstance(log_tail, list) and log_tail != node.log_tail)
    node.reported_status = status
    node.last_seen_at = timezone.now()
    fields = ["reported_status", "last_seen_at"]
    if "served_model_name" in heartbeat:  # sent only when a cold restart changed it
        model_name = _model_name(heartbeat["served_model_name"])
        changed = changed or model_name != node.served_model_name
        node.served_model_name = model_name
        fields.append("served_model_name")
    if isinstance(log_tail, list):
        node.log_tail = log_tail
        fields.append("log_tail")
    speculation = reported_speculation(heartbeat.get("speculation"))
    if speculation is not None:
        changed = changed or speculation.get("state") != node.speculation.get("state")
        node.speculation = speculation
        fields.append("speculation")
    node.save(update_fields=fields)
    if changed:
        _broadcast(node)


def nodes_warmup_progress(*, reports: dict[int, list[dict]]) -> None:
    """Warmup runs' progress (`{state, done, total, p50, p99, concurrency, ...}`) of many nodes, each node's reports
    in the order sent, in one transaction; live on the node pages."""
    now = timezone.now()
    with transaction.atomic():
        nodes = EngineNode.objects.select_for_update().in_bulk(list(reports))
        for node_id, node_reports in reports.items():
            node = nodes.get(node_id)
            if node is None:
                continue  # deleted meanwhile
            for progress in node_reports:
                _record_warmup(node, progress, now)
            node.last_seen_at = now
            node.save(
                update_fields=[
                    "warmup_state", "warmup_progress", "warmup_finished_at", "warmup_failed_at", "last_seen_at",
                ]
            )  # fmt: skip
    for node in nodes.values():
        _broadcast(node)


def _gateway_url(value, agent_address: str | None) -> tuple[str, str]:
    """(the reported gateway URL, "") if the control plane may send to it, else ("", why not); nothing reported is
    no refusal."""
    if value in (None, ""):
        return "", ""
    try:
        return gateway_url_checked(value, agent_address=agent_address), ""
    except GatewayRefused as exc:
        return "", str(exc)[:300]


def _ip_address(value: str) -> str | None:
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        return None


def _model_name(value) -> str:
    if not isinstance(value, str) or len(value) > 255 or not value.isprintable():
        return ""
    return value


def _record_warmup(node: EngineNode, progress: dict, now) -> None:
    state = progress.get("state")
    if state not in EngineNode.WarmupState.values:
        return
    keys = (
        "trigger", "done", "total", "check_requests", "p50", "p99", "errors", "concurrency", "max_concurrency",
        "max_p99_s", "elapsed_s", "reason", "check_p99", "check_error_rate",
    )  # fmt: skip
    kept = {key: progress[key] for key in keys if isinstance(progress.get(key), int | float | str)}
    if isinstance(kept.get("reason"), str):
        kept["reason"] = kept["reason"][:500]
    if isinstance(kept.get("trigger"), str):
        kept["trigger"] = kept["trigger"][:32]
    finished = state in {EngineNode.WarmupState.PASSED, EngineNode.WarmupState.FAILED, EngineNode.WarmupState.SKIPPED}
    if finished and node.warmup_state == state and node.warmup_progress == kept:
        return  # the hello repeating the run we already have
    node.warmup_state = state
    node.warmup_progress = kept
    if finished:
        node.warmup_finished_at = now
    if state == EngineNode.WarmupState.FAILED:
        node.warmup_failed_at = now


def nodes_seen(*, node_ids: list[int]) -> None:
    """Heartbeats that changed nothing else: one UPDATE for every node heard from since the last one."""
    EngineNode.objects.filter(pk__in=node_ids).update(last_seen_at=timezone.now())


def node_config_result(*, node_id: int, ok: bool, content_hash: str, version: dict | None, error: str = "") -> None:
    """An ACK moves the node's applied version; a NACK keeps it and records the error."""
    now = timezone.now()
    with transaction.atomic():
        node = _locked(node_id)
        node.last_seen_at = now
        if ok:
            if content_hash != node.applied_hash:
                node.applied_at = now
            node.applied_hash = content_hash
            node.applied_version = _version_by_hash(content_hash, version)
            if node.last_nack_hash == content_hash:
                node.last_nack_hash, node.last_nack_error = "", ""
        else:
            node.last_nack_hash = content_hash
            node.last_nack_error = (error or "rejected without a reason")[:4000]
            node.last_nack_at = now
            version_runs.version_run_nacked(
                node=node, version=_version_by_hash(content_hash, version), error=node.last_nack_error, now=now
            )
        node.save()
    _broadcast(node)
    if not ok:
        # A canary node refusing the new version fails its stage at once, not at the end of the window.
        transaction.on_commit(lambda: rollouts.rollouts_nack_check(pool_id=node.pool_id))


def nodes_config_acked(*, node_ids: list[int], content_hash: str, version_id: int) -> None:
    """The common ACK, for many nodes in one UPDATE: the consumers know which version they pushed."""
    now = timezone.now()
    clears_nack = When(last_nack_hash=content_hash, then=Value(""))
    EngineNode.objects.filter(pk__in=node_ids).update(
        applied_hash=content_hash,
        applied_version_id=version_id,
        # A repeated ACK of the config the node already runs (a push to the whole pool) keeps its start time.
        applied_at=Case(
            When(applied_hash=content_hash, then=F("applied_at")), default=Value(now), output_field=DateTimeField()
        ),
        last_seen_at=now,
        last_nack_error=Case(clears_nack, default=F("last_nack_error"), output_field=TextField()),
        last_nack_hash=Case(clears_nack, default=F("last_nack_hash"), output_field=CharField()),
    )


def node_command_progress(*, node_id: int, command_id: int, state: str, progress: str = "", result: str = "") -> None:
    """Record how a command is going; a finished command keeps its final state."""
    if state not in NodeCommand.State.values:
        return
    updates = {"state": state, "progress": progress[:500], "result": result[:4000]}
    finished = state in {NodeCommand.State.SUCCEEDED, NodeCommand.State.FAILED}
    if finished:
        updates["finished_at"] = timezone.now()
    changed = NodeCommand.objects.filter(pk=command_id, node_id=node_id, finished_at__isnull=True).update(**updates)
    node = EngineNode.objects.get(pk=node_id)
    _broadcast(node)
    command = NodeCommand.objects.select_related("node__pool").filter(pk=command_id, node_id=node_id).first()
    if changed and command is not None:
        realtime.node_command_changed(command)
        if finished and command.op in {NodeCommand.Op.CLEANUP, *NodeCommand.SYSTEM_OPS}:
            cleanup.cleanup_dispatch_next(pool_id=node.pool_id)


def node_disconnected(*, node_id: int, session_id: str) -> None:
    """Only the live connection's end marks the node disconnected; an older one's late close changes nothing."""
    if not EngineNode.objects.filter(pk=node_id, session_id=session_id).update(is_connected=False):
        return
    node = EngineNode.objects.filter(pk=node_id).first()
    if node is not None:
        _broadcast(node)
        # A cleanup under way on it no longer holds its pool's lease; the next node may go.
        cleanup.cleanup_dispatch_next(pool_id=node.pool_id)


def _locked(node_id: int) -> EngineNode:
    return (
        EngineNode.objects.select_for_update(of=("self",))
        .select_related("pool__desired_version__template")
        .get(pk=node_id)
    )


def _status(value, default: str) -> str:
    return value if value in _STATUSES else default


def _version_by_hash(content_hash: str, ref) -> TemplateVersion | None:
    """The version an agent reports by reference, trusted only when its hash matches."""
    if not content_hash or not isinstance(ref, dict):
        return None
    version = (
        TemplateVersion.objects.select_related("template")
        .filter(template__name=ref.get("template"), number=ref.get("number"))
        .first()
    )
    return version if version is not None and version.content_hash == content_hash else None


def _broadcast(node: EngineNode) -> None:
    summary = node_summary(
        node=EngineNode.objects.select_related("pool__desired_version__template", "applied_version__template").get(
            pk=node.pk
        ),
        now=timezone.now(),
    )
    transaction.on_commit(lambda: realtime.node_updated(summary))
