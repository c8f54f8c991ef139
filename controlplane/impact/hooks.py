"""One call per changing service: turns the change's own objects into an impact record (services.impact_record_change).
Each hook is called inside the change's transaction and never raises."""

from controlplane.impact.models import ImpactRecord
from controlplane.impact.services import impact_record_change


def release(*, release) -> None:
    """A publish or rollback moved the pool's desired version (by hand, or a failed canary's automatic rollback)."""
    impact_record_change(
        kind=release.kind,
        pool=release.pool,
        actor=release.actor,
        reason=release.reason,
        version_before=release.previous_version,
        version_after=release.version,
        source={"type": "pool_release", "id": release.pk},
        changed_at=release.created_at,
    )


def canary_stage(*, rollout, evidence: dict, added: list[str]) -> None:
    """A canary rollout entered its next stage (its analysis passed, or an SRE promoted it)."""
    by = evidence.get("by")
    stage = f"stage {rollout.stage_index + 1} of {len(rollout.stages)}"
    impact_record_change(
        kind=ImpactRecord.Kind.CANARY_STAGE,
        pool=rollout.pool,
        actor=None,
        actor_name=by or "system",
        reason=evidence.get("reason") or f"canary analysis passed ({stage})",
        version_before=rollout.from_version,
        version_after=rollout.to_version,
        subject=f"{stage}: {', '.join(added) or 'no new nodes'} now run {rollout.to_version}",
        source={"type": "rollout", "id": rollout.pk, "stage": rollout.stage_index},
    )


def degradation(*, pool, entered: bool, actor, reason: str, cause: str, event_id: int, at) -> None:
    """The pool entered or left degradation (by hand or by its load)."""
    impact_record_change(
        kind=ImpactRecord.Kind.DEGRADATION_ON if entered else ImpactRecord.Kind.DEGRADATION_OFF,
        pool=pool,
        actor=actor,
        reason=reason,
        version_before=pool.desired_version,
        subject=f"degradation {'on' if entered else 'off'} ({cause})",
        source={"type": "degradation_event", "id": event_id},
        changed_at=at,
    )


def cleanup(*, pool, nodes: list[str], actor, reason: str, command_ids: list[int]) -> None:
    """Memory cleanup was asked of some of the pool's nodes."""
    impact_record_change(
        kind=ImpactRecord.Kind.CLEANUP,
        pool=pool,
        actor=actor,
        reason=reason,
        version_before=pool.desired_version,
        subject=f"memory cleanup of {', '.join(nodes)}",
        source={"type": "node_commands", "ids": command_ids},
    )


def intent_model(*, pool, before, after, actor, reason: str, release_id: int) -> None:
    """The pool's intent model changed (published, or back to the built-in one)."""
    was = str(before) if before is not None else "the built-in model"
    now = str(after) if after is not None else "the built-in model"
    impact_record_change(
        kind=ImpactRecord.Kind.INTENT_MODEL_PUBLISH,
        pool=pool,
        actor=actor,
        reason=reason,
        version_before=pool.desired_version,
        subject=f"intent model: {was} → {now}",
        source={"type": "intent_model_release", "id": release_id},
    )


def warmup(*, pool, before, after, actor, reason: str, assignment_id: int) -> None:
    """The warm-up dataset the pool's nodes replay changed."""
    was = str(before) if before is not None else "none"
    impact_record_change(
        kind=ImpactRecord.Kind.WARMUP_CHANGE,
        pool=pool,
        actor=actor,
        reason=reason,
        version_before=pool.desired_version,
        subject=f"warm-up dataset: {was} → {after}",
        source={"type": "pool_warmup", "id": assignment_id},
    )
