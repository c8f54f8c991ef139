"""Every write to pools: creation, publishing a version (with the whitelist versions it pins), rolling back."""

from django.db import IntegrityError, transaction
from django.utils import timezone

from controlplane.accounts.roles import Action
from controlplane.audit.services import audit_record, mutating_service
from controlplane.catalog.exceptions import ModelReferenceRefused
from controlplane.catalog.resolution import pinned_problems
from controlplane.lib.errors import Conflict, Forbidden, InvalidField, check_slug, optional_text, required_text
from controlplane.nodes import realtime, whitelist_pins
from controlplane.nodes.exceptions import NothingToRollBack, ProductionGateClosed
from controlplane.nodes.gate import version_gate
from controlplane.nodes.models import Pool, PoolRelease, Rollout
from controlplane.nodes.selectors import pool_previous_version, pool_rollback_targets
from controlplane.nodes.services import rollouts, version_runs
from controlplane.nodes.services.releases import release_record
from controlplane.params.models import TemplateVersion, WhitelistVersion


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


def _check_models(version: TemplateVersion) -> None:
    """The version's pinned model catalog entries may still go to the nodes (controlplane/catalog/resolution.py)."""
    problems = pinned_problems(version.effective_params, version.pinned_models or {})
    if problems:
        raise ModelReferenceRefused(problems)


@mutating_service
def pool_publish(*, actor, pool: Pool, version: TemplateVersion, reason: str, override_reason: str = "") -> PoolRelease:
    """Make `version` the pool's desired version, pinning the latest version of each whitelist it names.

    Publishing the desired version again (a republish) is how a production pool picks up whitelist edits; it is
    refused when its pins are already the latest. Production needs the version to have run healthy on a
    non-production pool (nodes/gate.py), and every whitelist version it newly pins to have been in effect on one,
    unless an SRE overrides with a reason.
    """
    reason = required_text("reason", reason)
    _check_models(version)
    with transaction.atomic():
        locked = Pool.objects.select_for_update().get(pk=pool.pk)
        pins = whitelist_pins.pins_for(version)
        current_pins = whitelist_pins.release_pins(whitelist_pins.latest_release(locked))
        if locked.desired_version_id == version.pk and (not locked.is_production or pins == current_pins):
            whitelists = "follows the latest whitelists" if not locked.is_production else "its whitelists are current"
            raise Conflict(f"version: {version} is already the desired version of {locked.name}, and {whitelists}")
        active = Rollout.objects.filter(pool=locked, state__in=Rollout.ACTIVE).select_related("to_version").first()
        if active is not None:
            raise Conflict(
                f"pool: the rollout of {active.to_version} to {locked.name} is under way; "
                "promote it to the end, abort it or roll back first"
            )
        override_reason = optional_text("override_reason", override_reason)
        closed = (
            _production_gate(version=version, new_pins=[v for v in pins if v not in current_pins])
            if locked.is_production
            else None
        )
        if closed is not None:
            if not override_reason:
                raise closed
            if not actor.can(Action.PRODUCTION_OVERRIDE):
                raise Forbidden("override_reason: only an SRE may skip the non-production stage")
        else:
            # Recorded only when the gate was actually skipped, so the timeline never shows a false override.
            override_reason = ""
        # A canary when the pool has something to compare against: an earlier version and nodes left to run it.
        first_stage = rollouts.rollout_first_stage(pool=locked)
        audit_after = {"canary": [node.name for node in first_stage]} if first_stage else {}
        if override_reason:
            audit_after["production_gate"] = closed.detail[0]["message"]  # what the override skipped
        release = release_record(
            pool=locked,
            actor=actor,
            kind=PoolRelease.Kind.PUBLISH,
            version=version,
            whitelist_versions=pins,
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


def _production_gate(*, version: TemplateVersion, new_pins: list[WhitelistVersion]) -> ProductionGateClosed | None:
    """Why a publish to a production pool needs an override, or None when it does not. The version's runs are
    checked now (fresh evidence, not the watch's last pass); then the whitelist versions it would newly pin."""
    now = timezone.now()
    version_runs.version_runs_watch(now=now, version=version)
    gate = version_gate(version=version, now=now)
    if not gate.has_run:
        return ProductionGateClosed(
            f"version: {version} {gate.refusal}; or an SRE gives override_reason",
            detail=[
                {"path": "version", "message": gate.summary},
                {"path": "override_reason", "message": "give one to publish anyway (SRE)"},
            ],
        )
    untried = whitelist_pins.versions_off_non_production(new_pins)
    if untried:
        names = ", ".join(str(v) for v in untried)
        return ProductionGateClosed(
            f"whitelists: {names} never took effect on a non-production pool; "
            "publish a version naming it to staging first, or an SRE gives override_reason",
            detail=[
                {"path": "whitelists", "message": f"{names}: not yet in effect on a non-production pool"},
                {"path": "override_reason", "message": "give one to publish anyway (SRE)"},
            ],
        )
    return None


@mutating_service
def pool_rollback(*, actor, pool: Pool, reason: str, version: TemplateVersion | None = None) -> PoolRelease:
    """Return the pool to its previous version, or to `version` if it ran that one before, with the whitelist
    versions it had then. `version` equal to the desired one returns the whitelists of the release before a
    republish."""
    reason = required_text("reason", reason)
    with transaction.atomic():
        locked = Pool.objects.select_for_update().get(pk=pool.pk)
        if version is None:
            version = pool_previous_version(pool=locked)
            if version is None:
                raise NothingToRollBack(f"pool: {locked.name} has no earlier version to roll back to")
        elif version.pk != locked.desired_version_id and version.pk not in {
            v.pk for v in pool_rollback_targets(pool=locked)
        }:
            raise InvalidField("version", f"{version} never ran on {locked.name}; publish it instead")
        latest = whitelist_pins.latest_release(locked)
        pins = whitelist_pins.rollback_pins(locked, version)
        ran_before = whitelist_pins.newest_release_of(locked, version, before=latest) is not None
        if version.pk == locked.desired_version_id and (not ran_before or pins == whitelist_pins.release_pins(latest)):
            raise Conflict(
                f"version: {version} is what {locked.name} runs now, with these whitelists; nothing to roll back"
            )
        _check_models(version)
        # Rolling back during a canary ends it: every node, canary or not, goes to the rollback's version.
        ended = rollouts.rollout_end_active(
            pool=locked, state=Rollout.State.ABORTED, outcome=f"rolled back by {actor.get_username()}: {reason}"
        )
        release = release_record(
            pool=locked,
            actor=actor,
            kind=PoolRelease.Kind.ROLLBACK,
            version=version,
            whitelist_versions=pins,
            reason=reason,
            audit_after={"rollout_aborted": ended.pk} if ended else None,
        )
        transaction.on_commit(lambda: realtime.pool_released(release))
        if ended:
            transaction.on_commit(lambda: rollouts.rollout_broadcast(rollout_id=ended.pk))
    return release
