"""Reads about pools: their release timeline and the versions a rollback may return to."""

from django.db.models import QuerySet

from controlplane.nodes.models import EngineNode, Pool, PoolRelease
from controlplane.nodes.realtime import version_ref
from controlplane.params.diff import FieldChange, params_diff
from controlplane.params.models import TemplateVersion


def pool_timeline(*, pool: Pool) -> QuerySet[PoolRelease]:
    return pool.releases.select_related("version__template", "previous_version__template", "actor")


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


def version_reached_non_production(*, version: TemplateVersion) -> bool:
    return PoolRelease.objects.filter(version=version, pool__is_production=False).exists()


def version_ids_on_non_production() -> set[int]:
    """Ids of every version that was ever released to a non-production pool, in one query."""
    return set(PoolRelease.objects.filter(pool__is_production=False).values_list("version_id", flat=True))


def pool_change_preview(*, pool: Pool, version: TemplateVersion) -> list[FieldChange]:
    """What would change on the pool's nodes if `version` became desired."""
    current = pool.desired_version.effective_params if pool.desired_version else {}
    return params_diff(current, version.effective_params)


def node_summary(*, node, now) -> dict:
    """What the fleet view shows of one node; also the payload of live `node.updated` events."""
    desired = node.pool.desired_version
    return {
        "name": node.name,
        "pool": node.pool.name,
        "status": node.status(now),
        "backend": node.backend,
        "engine_version": node.engine_version,
        "hostname": node.hostname,
        "applied": version_ref(node.applied_version),
        "desired": version_ref(desired),
        "in_sync": bool(desired) and node.applied_hash == desired.content_hash,
        "last_nack_error": node.last_nack_error,
        "nacked_desired": bool(desired) and node.last_nack_hash == desired.content_hash,
        "last_seen_at": node.last_seen_at.isoformat() if node.last_seen_at else None,
        "log_tail": node.log_tail[-20:],
        "has_token": node.has_token,
    }


def pool_rollout(*, pool, now) -> dict:
    """Which nodes run the desired version: acked, failed (NACKed it), or still pending."""
    nodes = [
        node_summary(node=n, now=now)
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


def fleet_status_counts(*, now) -> dict[str, int]:
    """How many nodes are in each status, for the overview."""
    counts: dict[str, int] = {}
    for node in EngineNode.objects.all():
        status = node.status(now)
        counts[status] = counts.get(status, 0) + 1
    return dict(sorted(counts.items()))
