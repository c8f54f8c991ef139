"""The one write behind every change of a pool's desired version: the release row, the pool and its audit entry."""

from controlplane.audit.services import audit_record
from controlplane.nodes import realtime
from controlplane.nodes.models import Pool, PoolRelease
from controlplane.params.models import TemplateVersion


def release_record(
    *,
    pool: Pool,
    actor,
    kind: str,
    version: TemplateVersion,
    reason: str,
    override_reason: str = "",
    audit_after: dict | None = None,
    audited: bool = True,
) -> PoolRelease:
    """Record the release and move `pool.desired_version`; the caller holds the pool's row lock and pushes on commit.

    `actor` None is the control plane itself (a canary that failed its analysis), audited as "system".
    `audited` False: the caller's own entry covers it (an SRE aborting a rollout).
    """
    previous = pool.desired_version
    release = PoolRelease.objects.create(
        pool=pool,
        kind=kind,
        version=version,
        previous_version=previous,
        actor=actor,
        reason=reason,
        override_reason=override_reason,
    )
    pool.desired_version = version
    pool.save(update_fields=["desired_version"])
    if not audited:
        return release
    audit_record(
        actor=actor,
        action=f"pool.{kind}",
        target=pool,
        before={"desired_version": realtime.version_ref(previous)},
        after={
            "desired_version": realtime.version_ref(version),
            "override_reason": override_reason or None,
            **(audit_after or {}),
        },
        reason=reason,
    )
    return release
