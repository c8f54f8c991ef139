"""The one write behind every change of a pool's desired version: the release row, its whitelist pins, the pool and
its audit entry."""

from controlplane.audit.services import audit_record
from controlplane.impact import hooks as impact_hooks
from controlplane.lib.realtime import version_ref
from controlplane.nodes import whitelist_pins
from controlplane.nodes.models import Pool, PoolRelease
from controlplane.params.models import TemplateVersion, WhitelistVersion


def release_record(
    *,
    pool: Pool,
    actor,
    kind: str,
    version: TemplateVersion,
    whitelist_versions: list[WhitelistVersion],
    reason: str,
    override_reason: str = "",
    audit_after: dict | None = None,
    audited: bool = True,
) -> PoolRelease:
    """Record the release with the whitelist versions it pins and move `pool.desired_version`; the caller holds the
    pool's row lock and pushes on commit.

    `actor` None is the control plane itself (a canary that failed its analysis), audited as "system".
    `audited` False: the caller's own entry covers it (an SRE aborting a rollout).
    """
    previous = pool.desired_version
    previous_pins = whitelist_pins.pins_summary(whitelist_pins.release_pins(whitelist_pins.latest_release(pool)))
    release = PoolRelease.objects.create(
        pool=pool,
        kind=kind,
        version=version,
        previous_version=previous,
        actor=actor,
        reason=reason,
        override_reason=override_reason,
    )
    release.whitelist_versions.set(whitelist_versions)
    pool.desired_version = version
    pool.save(update_fields=["desired_version"])
    impact_hooks.release(release=release)
    if not audited:
        return release
    audit_record(
        actor=actor,
        action=f"pool.{kind}",
        target=pool,
        before={"desired_version": version_ref(previous), "whitelists": previous_pins},
        after={
            "desired_version": version_ref(version),
            "whitelists": whitelist_pins.pins_summary(whitelist_versions),
            "override_reason": override_reason or None,
            **(audit_after or {}),
        },
        reason=reason,
    )
    return release
