"""Reads about pools and nodes: release timeline, rollback targets, rollouts, node and command summaries, and how
clients call a node."""

import json
import shlex

from django.db.models import QuerySet
from django.utils import timezone

from controlplane.lib.realtime import version_ref
from controlplane.nodes.models import ClientKey, EngineNode, NodeCommand, Pool, PoolRelease, Rollout
from controlplane.nodes.speculation_figures import speculation_figures, speculation_summary
from controlplane.nodes.waiting import (
    PoolContext,
    cleanup_waiting_for,
    node_sync_reason,
    sent_waiting_for,
    window_left_s,
)
from controlplane.params.diff import FieldChange, params_diff
from controlplane.params.models import TemplateVersion


def pool_timeline(*, pool: Pool) -> QuerySet[PoolRelease]:
    return pool.releases.select_related("version__template", "previous_version__template", "actor").prefetch_related(
        "whitelist_versions__whitelist"
    )


def pool_rollback_targets(*, pool: Pool) -> list[TemplateVersion]:
    """Versions this pool ran before, newest release first, without the current one."""
    seen: dict[int, TemplateVersion] = {}
    for release in pool_timeline(pool=pool):
        for version in (release.version, release.previous_version):
            if version is not None and version.pk != pool.desired_version_id and version.pk not in seen:
                seen[version.pk] = version
    return list(seen.values())


def pool_previous_version(*, pool: Pool) -> TemplateVersion | None:
    """What the pool ran before its current desired version, if anything."""
    latest = pool_timeline(pool=pool).first()
    return latest.previous_version if latest else None


def pool_change_preview(*, pool: Pool, version: TemplateVersion) -> list[FieldChange]:
    """What would change on the pool's nodes if `version` became desired."""
    current = pool.desired_version
    if current is None:
        return params_diff({}, version.effective_params)
    return params_diff(
        current.effective_params,
        version.effective_params,
        old_models=current.pinned_models,
        new_models=version.pinned_models,
    )


def node_summary(*, node, now, context: PoolContext | None = None) -> dict:
    """What the fleet view shows of one node; also the payload of live `node.updated` events.

    `sync_code`/`sync_reason` say why it does not run the desired version yet (waiting.py); `context` shares the
    pool's reads between the nodes of one pool."""
    desired = node.pool.desired_version
    sync_code, sync_reason = node_sync_reason(node=node, now=now, context=context)
    return {
        "name": node.name,
        "pool": node.pool.name,
        "status": node.status(now),
        "backend": node.backend,
        "engine_version": node.engine_version,
        "hostname": node.hostname,
        "gateway_url": node.gateway_url,
        "served_model_name": node.served_model_name,
        "applied": version_ref(node.applied_version),
        "desired": version_ref(desired),
        "in_sync": bool(desired) and node.applied_hash == desired.content_hash,
        "last_nack_error": node.last_nack_error,
        "nacked_desired": bool(desired) and node.last_nack_hash == desired.content_hash,
        "sync_code": sync_code,
        "sync_reason": sync_reason,
        "last_seen_at": node.last_seen_at.isoformat() if node.last_seen_at else None,
        "log_tail": node.log_tail[-20:],
        "has_token": node.has_token,
        "warmup": {
            **(node.warmup_progress or {}),
            "state": node.warmup_state,
            "finished_at": node.warmup_finished_at.isoformat() if node.warmup_finished_at else None,
        },
        "speculation": speculation_summary(node.speculation),
    }


def pool_rollout(*, pool, now) -> dict:
    """Which nodes run the desired version: acked, failed (NACKed it), or still pending."""
    context = PoolContext(pool)
    nodes = [
        node_summary(node=n, now=now, context=context)
        for n in pool.nodes.select_related("applied_version__template", "pool__desired_version__template")
    ]
    acked = sum(1 for n in nodes if n["in_sync"])
    failed = sum(1 for n in nodes if n["nacked_desired"] and not n["in_sync"])
    if pool.desired_version is None:
        state = "idle"
    elif not nodes:
        state = "no_nodes"
    elif failed:
        state = "failed"
    else:
        state = "complete" if acked == len(nodes) else "in_progress"
    return {"pool": pool.name, "state": state, "total": len(nodes), "acked": acked, "failed": failed, "nodes": nodes}


def node_desired_version(*, node) -> TemplateVersion | None:
    """The version this node should run: during a canary, the new one only if a stage has reached it."""
    rollout = (
        Rollout.objects.filter(pool_id=node.pool_id, state__in=Rollout.ACTIVE)
        .select_related("from_version__template", "to_version__template")
        .first()
    )
    if rollout is None:
        return node.pool.desired_version
    return rollout.to_version if node.name in rollout.canary_nodes else rollout.from_version


def pool_active_rollout(*, pool) -> Rollout | None:
    return (
        Rollout.objects.filter(pool=pool, state__in=Rollout.ACTIVE)
        .select_related("pool", "from_version__template", "to_version__template")
        .first()
    )


def pool_latest_rollout(*, pool) -> Rollout | None:
    """The active rollout, else the one that ended last (the pool page keeps showing how it went)."""
    return pool_active_rollout(pool=pool) or (
        Rollout.objects.filter(pool=pool)
        .select_related("pool", "from_version__template", "to_version__template")
        .first()
    )


def rollout_summary(*, rollout: Rollout, now) -> dict:
    """What the pool page shows of a rollout; also the payload of live `rollout.updated` events."""
    target = rollout.to_version.content_hash
    nodes = {n.name: n for n in rollout.pool.nodes.all()}
    stages = []
    for index, names in enumerate(rollout.stage_nodes):
        stages.append(
            {
                "index": index,
                "nodes": [
                    {
                        "name": name,
                        "acked": name in nodes and nodes[name].applied_hash == target,
                        "nacked": name in nodes
                        and nodes[name].last_nack_hash == target
                        and nodes[name].applied_hash != target,
                    }
                    for name in names
                ],
            }
        )
    canary = set(rollout.canary_nodes)
    return {
        "id": rollout.pk,
        "pool": rollout.pool.name,
        "state": rollout.state,
        "is_active": rollout.is_active,
        "from_version": version_ref(rollout.from_version),
        "to_version": version_ref(rollout.to_version),
        "stages": rollout.stages,
        "stage_index": rollout.stage_index,
        "stage_nodes": stages,
        "baseline_nodes": sorted(set(nodes) - canary),
        "analysis_window_s": rollout.pool.analysis_window_s,
        "stage_started_at": rollout.stage_started_at.isoformat(),
        "stage_acked_at": rollout.stage_acked_at.isoformat() if rollout.stage_acked_at else None,
        "window_left_s": window_left_s(rollout, now) if rollout.is_active else None,
        "latest_analysis": rollout.evidence[-1] if rollout.evidence else None,
        "outcome": rollout.outcome,
        "finished_at": rollout.finished_at.isoformat() if rollout.finished_at else None,
    }


def fleet_status_counts(*, now) -> dict[str, int]:
    """How many nodes are in each status, for the overview."""
    counts: dict[str, int] = {}
    for node in EngineNode.objects.all():
        status = node.status(now)
        counts[status] = counts.get(status, 0) + 1
    return dict(sorted(counts.items()))


def cleanup_figures(*, result: str) -> dict | None:
    """The before/after figures of a finished cleanup, from the JSON result the agent reported; None otherwise."""
    try:
        document = json.loads(result) if result.startswith("{") else None
    except ValueError:
        return None
    if not isinstance(document, dict):
        return None
    before, after = document.get("before") or {}, document.get("after") or {}

    def ratio(figures: dict, key: str) -> float | None:
        value = figures.get(key)
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None

    figures = {
        "trigger": str(document.get("trigger", "")),
        "fragmentation_before": ratio(before, "fragmentation"),
        "fragmentation_after": ratio(after, "fragmentation"),
        "kv_usage_before": ratio(before, "kv_cache_usage"),
        "kv_usage_after": ratio(after, "kv_cache_usage"),
        "device": str(before.get("device") or after.get("device") or ""),
        "duration_s": ratio(document, "duration_s"),
        "drained_s": ratio(document, "drained_s"),
        "error": str(document.get("error", "")),
    }
    figures["text"] = _cleanup_text(figures)
    return figures


def warmup_figures(*, result: str) -> dict | None:
    """A finished on-demand warmup's outcome in one line (the agent reports its final progress as JSON)."""
    try:
        document = json.loads(result) if result.startswith("{") else None
    except ValueError:
        return None
    if not isinstance(document, dict) or not isinstance(document.get("state"), str):
        return None
    parts = [document["state"]]
    if isinstance(document.get("total"), int):
        parts.append(f"{document.get('done', 0)}/{document['total']} requests")
    for key in ("p50", "p99"):
        if isinstance(document.get(key), int | float):
            parts.append(f"{key} {document[key]:.3f} s")
    if isinstance(document.get("elapsed_s"), int | float):
        parts.append(f"{document['elapsed_s']:.1f} s")
    text = " · ".join(parts)
    if document.get("reason"):
        text += f" ({str(document['reason'])[:300]})"
    return {"state": document["state"], "text": text}


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 100:.1f} %"


def _cleanup_text(figures: dict) -> str:
    """One line for people: fragmentation and KV-cache usage before → after, and how long the gate was closed."""
    fragmentation = (
        f"fragmentation {_percent(figures['fragmentation_before'])} → {_percent(figures['fragmentation_after'])}"
    )
    if figures["fragmentation_before"] is None and figures["fragmentation_after"] is None and figures["device"]:
        fragmentation += f" (no allocator statistics on {figures['device']})"
    parts = [fragmentation, f"KV cache {_percent(figures['kv_usage_before'])} → {_percent(figures['kv_usage_after'])}"]
    if figures["duration_s"] is not None:
        parts.append(f"{figures['duration_s']:.1f} s")
    if figures["error"]:
        parts.append(figures["error"])
    return " · ".join(parts)


def command_summary(*, command: NodeCommand) -> dict:
    """What the node page shows of one command; also the payload of live `node.command_changed` events."""
    return {
        "id": command.pk,
        "node": command.node.name,
        "pool": command.node.pool.name,
        "op": command.op,
        "op_display": command.get_op_display(),
        "state": command.state,
        "progress": command.progress,
        "result": command.result,
        "figures": cleanup_figures(result=command.result)
        if command.op == NodeCommand.Op.CLEANUP
        else warmup_figures(result=command.result)
        if command.op == NodeCommand.Op.WARMUP
        else speculation_figures(result=command.result)
        if command.op in NodeCommand.SYSTEM_OPS
        else None,
        "waiting_for": command_waiting_for(command=command, now=timezone.now()),
        "requested_by": command.requester,
        "reason": command.reason,
        "requested_at": command.requested_at.isoformat() if command.requested_at else None,
        "sent_at": command.sent_at.isoformat() if command.sent_at else None,
        "finished_at": command.finished_at.isoformat() if command.finished_at else None,
    }


def command_waiting_for(*, command: NodeCommand, now) -> str:
    """What a command that has not started waits for (the pool's cleanup lease, the node...); empty otherwise."""
    if command.state != NodeCommand.State.PENDING or command.finished_at is not None:
        return ""
    if command.op == NodeCommand.Op.CLEANUP:
        return cleanup_waiting_for(command=command, now=now)
    return sent_waiting_for(command=command, now=now) if command.sent_at else ""


def pool_client_keys(*, pool: Pool, revoked: int = 5) -> list[ClientKey]:
    """The pool's live keys, then the `revoked` most recently revoked ones (what the pool page lists)."""
    keys = ClientKey.objects.filter(pools=pool).select_related("created_by", "revoked_by").prefetch_related("pools")
    live = list(keys.filter(revoked_at__isnull=True).order_by("name"))
    return live + list(keys.filter(revoked_at__isnull=False).order_by("-revoked_at")[:revoked])


CLIENT_KEY_PLACEHOLDER = "<your client key>"
EXAMPLE_MESSAGE = "Where is my order?"


def node_client_example(*, node: EngineNode) -> dict | None:
    """How a client calls this node's gateway: base URL, model name and an example call with curl and with the
    `openai` package; None until the agent has reported where its gateway is. The key is a placeholder, never a
    real one. Values are quoted for their language (shell, Python), whatever the agent reported."""
    if not node.gateway_url:
        return None
    base_url = f"{node.gateway_url}/v1"
    model = node.served_model_name or "<model name>"
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": EXAMPLE_MESSAGE}]}, ensure_ascii=False)
    curl = "\n".join(
        [
            f"curl {shlex.quote(base_url + '/chat/completions')} \\",
            f"  -H {shlex.quote('Authorization: Bearer ' + CLIENT_KEY_PLACEHOLDER)} \\",
            "  -H 'Content-Type: application/json' \\",
            f"  -d {shlex.quote(body)}",
        ]
    )
    python = "\n".join(
        [
            "from openai import OpenAI",
            "",
            f"client = OpenAI(base_url={json.dumps(base_url)}, api_key={json.dumps(CLIENT_KEY_PLACEHOLDER)})",
            "reply = client.chat.completions.create(",
            f"    model={json.dumps(model, ensure_ascii=False)},",
            f'    messages=[{{"role": "user", "content": {json.dumps(EXAMPLE_MESSAGE)}}}],',
            ")",
            "print(reply.choices[0].message.content)",
        ]
    )
    return {"base_url": base_url, "model": model, "curl": curl, "python": python}
