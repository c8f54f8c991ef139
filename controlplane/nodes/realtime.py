"""Events about pools, sent to the fleet group and the pool's own group."""

from controlplane.lib import realtime


def version_ref(version) -> realtime.VersionRef | None:
    if version is None:
        return None
    return {"template": version.template.name, "number": version.number, "hash": version.content_hash}


def pool_released(release) -> None:
    event: realtime.PoolReleased = {
        "type": "pool.released",
        "pool": release.pool.name,
        "kind": release.kind,
        "version": version_ref(release.version),
        "previous_version": version_ref(release.previous_version),
        "actor": release.actor.get_username(),
        "reason": release.reason,
        "at": release.created_at.isoformat(),
    }
    realtime.send([realtime.fleet_group(), realtime.pool_group(release.pool.name)], event)
