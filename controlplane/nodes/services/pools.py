"""Every write to pools: creation, publishing a version, rolling back."""

from django.db import IntegrityError, transaction
from django.utils import timezone

from controlplane.accounts.roles import Action
from controlplane.audit.services import audit_record, mutating_service
from controlplane.lib.errors import Conflict, Forbidden, InvalidField, check_slug, required_text
from controlplane.nodes import realtime
from controlplane.nodes.exceptions import NothingToRollBack, ProductionGateClosed
from controlplane.nodes.gate import GateVerdict, version_gate
from controlplane.nodes.models import Pool, PoolRelease, Rollout
from controlplane.nodes.selectors import pool_previous_version, pool_rollback_targets
from controlplane.nodes.services import rollouts, version_runs
from controlplane.nodes.services.releases import release_record
from controlplane.params.models import TemplateVersion


@mutating_service
def pool_create(*, actor, name: str, is_production: bool, description: str = "") -> Pool:
    """A new pool with no desired version yet."""
    check_slug("name", name)
    with transaction.atomic():
        try:
            with transaction.atomic():
                pool = Pool.objects.create(name=name, is_production=is_production, description=description)
        except IntegrityError:
            raise Conflict(f"name: a pool named {name!r} already exists") from None
        audit_record(
            actor=actor, action="pool.create", target=pool, after={"name": name, "is_production": is_production}
        )
    return pool


@mutating_service
def pool_publish(*, actor, pool: Pool, version: TemplateVersion, reason: str, override_reason: str = "") -> PoolRelease:
    """Make `version` the pool's desired version; production needs the version to have run healthy on a
    non-production pool (nodes/gate.py) or an SRE's override."""
    reason = required_text("reason", reason)
    with transaction.atomic():
        locked = Pool.objects.select_for_update().get(pk=pool.pk)
        if locked.desired_version_id == version.pk:
            raise Conflict(f"version: {version} is already the desired version of {locked.name}")
        active = Rollout.objects.filter(pool=locked, state__in=Rollout.ACTIVE).select_related("to_version").first()
        if active is not None:
            raise Conflict(
                f"pool: the rollout of {active.to_version} to {locked.name} is under way; "
                "promote it to the end, abort it or roll back first"
            )
        override_reason = override_reason.strip()
        gate = _production_gate(version) if locked.is_production else None
        if gate is not None and not gate.has_run:
            if not override_reason:
                raise ProductionGateClosed(
                    f"version: {version} {gate.refusal}; or an SRE gives override_reason",
                    detail=[
                        {"path": "version", "message": gate.summary},
                        {"path": "override_reason", "message": "give one to publish anyway (SRE)"},
                    ],
                )
            if not actor.can(Action.PRODUCTION_OVERRIDE):
                raise Forbidden("override_reason: only an SRE may skip the non-production stage")
        else:
            # Recorded only when the gate was actually skipped, so the timeline never shows a false override.
            override_reason = ""
        # A canary when the pool has something to compare against: an earlier version and nodes left to run it.
        first_stage = rollouts.rollout_first_stage(pool=locked)
        audit_after = {"canary": [node.name for node in first_stage]} if first_stage else {}
        if override_reason:
            audit_after["production_gate"] = gate.summary  # what the override skipped
        release = release_record(
            pool=locked,
            actor=actor,
            kind=PoolRelease.Kind.PUBLISH,
            version=version,
            reason=reason,
            override_reason=override_reason,
            audit_after=audit_after or None,
        )
        if first_stage:
            rollout = rollouts.rollout_begin(release=release, first_stage=first_stage, actor=actor)
            node_ids = [node.pk for node in first_stage]
            transaction.on_commit(lambda: realtime.pool_released(release, node_ids=node_ids))
            transaction.on_commit(lambda: rollouts.rollout_broadcast(rollout_id=rollout.pk))
        else:
            transaction.on_commit(lambda: realtime.pool_released(release))
    return release


def _production_gate(version: TemplateVersion) -> GateVerdict:
    """The gate's verdict on fresh evidence: the version's runs are checked now, not at the watch's last pass."""
    now = timezone.now()
    version_runs.version_runs_watch(now=now, version=version)
    return version_gate(version=version, now=now)


@mutating_service
def pool_rollback(*, actor, pool: Pool, reason: str, version: TemplateVersion | None = None) -> PoolRelease:
    """Return the pool to its previous version, or to `version` if it ran that one before."""
    reason = required_text("reason", reason)
    with transaction.atomic():
        locked = Pool.objects.select_for_update().get(pk=pool.pk)
        if version is None:
            version = pool_previous_version(pool=locked)
            if version is None:
                raise NothingToRollBack(f"pool: {locked.name} has no earlier version to roll back to")
        elif version.pk == locked.desired_version_id:
            raise Conflict(f"version: {version} is what {locked.name} runs now; nothing to roll back")
        elif version.pk not in {v.pk for v in pool_rollback_targets(pool=locked)}:
            raise InvalidField("version", f"{version} never ran on {locked.name}; publish it instead")
        # Rolling back during a canary ends it: every node, canary or not, goes to the rollback's version.
        ended = rollouts.rollout_end_active(
            pool=locked, state=Rollout.State.ABORTED, outcome=f"rolled back by {actor.get_username()}: {reason}"
        )
        release = release_record(
            pool=locked,
            actor=actor,
            kind=PoolRelease.Kind.ROLLBACK,
            version=version,
            reason=reason,
            audit_after={"rollout_aborted": ended.pk} if ended else None,
        )
        transaction.on_commit(lambda: realtime.pool_released(release))
        if ended:
            transaction.on_commit(lambda: rollouts.rollout_broadcast(rollout_id=ended.pk))
    return release
