"""Canary rollouts: a publish reaches the pool stage by stage, each stage watched for an analysis window.

A stage's window starts once all its nodes ACKed the new version and their samples describe it alone: each 1 s
sample's latency figures cover the node's last `sample_window_s()` seconds of requests, so the samples of those first
seconds still mix in requests served by the version before (a slow version's first samples would read as half
fast). After that settling time and the pool's analysis window, the canary nodes' P99, error rate and spec-decode
acceptance (means over the window) are compared with the rest of the pool (the baseline) and with the p99-latency
alert rule's thresholds (canary_analysis.py). A pass promotes to the next stage; a fail (or a NACK from a canary
node, or no ACK within ROLLOUT_APPLY_TIMEOUT_S) ends the rollout and the control plane itself rolls the canary nodes
back to the version they ran before, audited as "system" with the evidence. The last stage covers the whole pool, so
it has no baseline: it succeeds once every node ACKed, and from then on the alert rules watch the pool as always.
"""

import math
from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from controlplane.audit.services import audit_record, mutating_service
from controlplane.impact import hooks as impact_hooks
from controlplane.lib.errors import Conflict, required_text
from controlplane.metrics.samples import sample_window_s
from controlplane.nodes import realtime, whitelist_pins
from controlplane.nodes.models import EngineNode, Pool, PoolRelease, Rollout
from controlplane.nodes.selectors import rollout_summary
from controlplane.nodes.services.canary_analysis import rollout_analysis
from controlplane.nodes.services.releases import release_record

# Missing canary metrics (or a canary too slow to finish a request within its sample window) hold the stage; after
# this many windows of that the stage fails.
STALE_WINDOWS_TO_FAIL = 2


# --- starting -------------------------------------------------------------------------------------------


def stage_size(stage: dict, total: int) -> int:
    """How many nodes a stage covers in a pool of `total` (cumulative, at least one)."""
    wanted = stage["nodes"] if "nodes" in stage else math.ceil(total * stage["percent"] / 100)
    return max(1, min(total, wanted))


def rollout_first_stage(*, pool: Pool) -> list[EngineNode]:
    """The nodes a publish goes to first, or [] when it goes to every node at once (nothing to compare with:
    no earlier version, fewer than two nodes, or a first stage that already covers the pool)."""
    if pool.desired_version_id is None:
        return []
    # Counted first: a publish to a pool whose first stage covers it (often thousands of nodes) loads no node.
    total = pool.nodes.count()
    size = stage_size(pool.canary_stages[0], total) if total else 0
    if total < 2 or size >= total:
        return []
    return _candidates(pool, exclude=set(), limit=size)


def rollout_begin(*, release: PoolRelease, first_stage: list[EngineNode], actor) -> Rollout:
    """The rollout of a publish that goes to `first_stage` first; pool_publish audits it."""
    return Rollout.objects.create(
        pool=release.pool,
        from_version=release.previous_version,
        to_version=release.version,
        release=release,
        stages=release.pool.canary_stages,
        stage_started_at=timezone.now(),
        stage_nodes=[[node.name for node in first_stage]],
        created_by=actor,
    )


def rollout_end_active(*, pool: Pool, state: str, outcome: str) -> Rollout | None:
    """End the pool's active rollout, if any (a rollback does; its caller writes the audit entry)."""
    rollout = Rollout.objects.select_for_update().filter(pool=pool, state__in=Rollout.ACTIVE).first()
    if rollout is None:
        return None
    rollout.state, rollout.outcome, rollout.finished_at = state, outcome[:2000], timezone.now()
    rollout.save(update_fields=["state", "outcome", "finished_at"])
    return rollout


def _candidates(pool: Pool, exclude: set[str], limit: int) -> list[EngineNode]:
    """The first `limit` nodes that may join a stage: connected ones first (they ACK and report), then by name."""
    if limit <= 0:
        return []
    return list(pool.nodes.exclude(name__in=exclude).order_by("-is_connected", "name")[:limit])


# --- SRE actions ----------------------------------------------------------------------------------------


@mutating_service
def rollout_pause(*, actor, rollout: Rollout, reason: str) -> Rollout:
    """Hold the rollout where it is: no analysis, no promotion, until resumed."""
    return _sre_action(actor, rollout, reason, "pause", _pause)


@mutating_service
def rollout_resume(*, actor, rollout: Rollout, reason: str) -> Rollout:
    """Continue a paused rollout; its stage gets a fresh analysis window."""
    return _sre_action(actor, rollout, reason, "resume", _resume)


@mutating_service
def rollout_promote(*, actor, rollout: Rollout, reason: str) -> Rollout:
    """Send the next stage now, without waiting for the analysis."""
    return _sre_action(actor, rollout, reason, "promote", _promote_now)


@mutating_service
def rollout_abort(*, actor, rollout: Rollout, reason: str) -> Rollout:
    """End the rollout and return the canary nodes to the version they ran before."""
    return _sre_action(actor, rollout, reason, "abort", _abort)


def _sre_action(actor, rollout: Rollout, reason: str, verb: str, change) -> Rollout:
    reason = required_text("reason", reason)
    with transaction.atomic():
        Pool.objects.select_for_update().get(pk=rollout.pool_id)
        locked = (
            Rollout.objects.select_for_update().select_related("pool", "to_version", "from_version").get(pk=rollout.pk)
        )
        if not locked.is_active:
            raise Conflict(f"rollout: it has already ended ({locked.state})")
        before = _audit_state(locked)
        change(locked, actor, reason)
        audit_record(
            actor=actor,
            action=f"rollout.{verb}",
            target=locked,
            before=before,
            after=_audit_state(locked),
            reason=reason,
        )
    transaction.on_commit(lambda: rollout_broadcast(rollout_id=locked.pk))
    return locked


def _pause(rollout: Rollout, actor, reason: str) -> None:
    if rollout.state == Rollout.State.PAUSED:
        raise Conflict("rollout: it is paused already")
    rollout.state = Rollout.State.PAUSED
    rollout.save(update_fields=["state"])


def _resume(rollout: Rollout, actor, reason: str) -> None:
    if rollout.state != Rollout.State.PAUSED:
        raise Conflict("rollout: it is not paused")
    rollout.state, rollout.stage_acked_at = Rollout.State.RUNNING, None
    rollout.save(update_fields=["state", "stage_acked_at"])


def _promote_now(rollout: Rollout, actor, reason: str) -> None:
    if _is_last_stage(rollout):
        raise Conflict("rollout: it is at its last stage already; it ends when every node has ACKed")
    _promote(rollout, {"verdict": "promoted", "by": actor.get_username(), "reason": reason})


def _abort(rollout: Rollout, actor, reason: str) -> None:
    _roll_back(rollout, actor=actor, state=Rollout.State.ABORTED, reason=f"rollout aborted: {reason}", audited=False)


# --- the analysis ---------------------------------------------------------------------------------------


def rollouts_analyse(*, now: datetime | None = None) -> int:
    """One pass over every running rollout (the periodic task); returns how many it looked at."""
    ids = list(Rollout.objects.filter(state=Rollout.State.RUNNING).values_list("pk", flat=True))
    for rollout_id in ids:
        rollout_step(rollout_id=rollout_id, now=now)
    return len(ids)


def rollout_step(*, rollout_id: int, now: datetime | None = None) -> None:
    """Move one rollout on: note its stage's ACKs, analyse a finished window, promote, succeed or roll back."""
    now = now or timezone.now()
    with transaction.atomic():
        Pool.objects.select_for_update().filter(rollouts__pk=rollout_id).first()
        rollout = (
            Rollout.objects.select_for_update()
            .select_related("pool", "to_version", "from_version")
            .filter(pk=rollout_id, state=Rollout.State.RUNNING)
            .first()
        )
        if rollout is None:
            return
        changed = _step(rollout, now)
    if changed:
        transaction.on_commit(lambda: rollout_broadcast(rollout_id=rollout_id))


def rollouts_nack_check(*, pool_id: int) -> None:
    """A node of this pool NACKed: if it is a canary node of a running rollout, the stage fails now."""
    for rollout_id in Rollout.objects.filter(pool_id=pool_id, state=Rollout.State.RUNNING).values_list("pk", flat=True):
        rollout_step(rollout_id=rollout_id)


def _step(rollout: Rollout, now: datetime) -> bool:
    target = rollout.to_version.content_hash
    canary = list(rollout.pool.nodes.filter(name__in=rollout.canary_nodes).order_by("name"))
    for node in canary:
        if node.last_nack_hash == target and node.applied_hash != target:
            evidence = {
                "stage": rollout.stage_index,
                "at": now.isoformat(),
                "verdict": "fail",
                "reasons": [f"{node.name} refused the version: {node.last_nack_error[:300]}"],
            }
            _fail(rollout, evidence)
            return True
    waiting = [node for node in canary if node.applied_hash != target]
    if waiting:
        return _apply_overdue(rollout, waiting, now)
    if rollout.stage_acked_at is None:
        rollout.stage_acked_at = now
        rollout.save(update_fields=["stage_acked_at"])
        return True
    if _is_last_stage(rollout):
        rollout.state, rollout.finished_at = Rollout.State.SUCCEEDED, now
        rollout.outcome = f"every node of {rollout.pool.name} runs {rollout.to_version}"
        rollout.save(update_fields=["state", "finished_at", "outcome"])
        return True
    window = rollout.pool.analysis_window_s
    # Seconds of samples that describe the new version alone: the stage's nodes ACKed, then their sample windows
    # turned over.
    held = (now - rollout.stage_acked_at).total_seconds() - sample_window_s()
    if held < window:
        return False
    evidence = rollout_analysis(rollout=rollout, now=now)
    if evidence["verdict"] == "hold" and held >= STALE_WINDOWS_TO_FAIL * window:
        evidence["verdict"] = "fail"
        if evidence.get("slow_nodes"):
            stale = "no canary request finished within a sample window"
        else:
            stale = "no canary metrics"
        evidence["reasons"].append(f"{stale} for {STALE_WINDOWS_TO_FAIL} analysis windows")
    if evidence["verdict"] == "pass":
        _promote(rollout, evidence)
    elif evidence["verdict"] == "fail":
        _fail(rollout, evidence)
    else:
        _record(rollout, evidence)
    return True


def _apply_overdue(rollout: Rollout, waiting: list[EngineNode], now: datetime) -> bool:
    """Fail the stage when its nodes have not ACKed within ROLLOUT_APPLY_TIMEOUT_S; False while they still may."""
    limit = settings.ROLLOUT_APPLY_TIMEOUT_S
    if (now - rollout.stage_started_at).total_seconds() < limit:
        return False
    described = ", ".join(
        f"{node.name} ({'connected' if node.is_connected else 'not connected'}, on "
        f"{node.applied_hash[:12] or 'nothing yet'})"
        for node in waiting
    )
    evidence = {
        "stage": rollout.stage_index,
        "at": now.isoformat(),
        "verdict": "fail",
        "reasons": [f"not applied within {limit} s: {described}"],
    }
    _fail(rollout, evidence)
    return True


# --- moving on ------------------------------------------------------------------------------------------


def _is_last_stage(rollout: Rollout) -> bool:
    return set(rollout.canary_nodes) >= set(rollout.pool.nodes.values_list("name", flat=True))


def _promote(rollout: Rollout, evidence: dict) -> None:
    """Enter the next stage that adds nodes; its nodes get the new version on commit."""
    pool = rollout.pool
    total = pool.nodes.count()
    covered = set(rollout.canary_nodes)
    index = rollout.stage_index + 1
    while index < len(rollout.stages) - 1 and stage_size(rollout.stages[index], total) <= len(covered):
        index += 1
    size = total if index >= len(rollout.stages) - 1 else stage_size(rollout.stages[index], total)
    added = _candidates(pool, exclude=covered, limit=size - len(covered))
    rollout.evidence = [*rollout.evidence, evidence]
    rollout.stage_index = min(index, len(rollout.stages) - 1)
    rollout.stage_nodes = [*rollout.stage_nodes, [node.name for node in added]]
    rollout.stage_started_at, rollout.stage_acked_at = timezone.now(), None
    rollout.save(update_fields=["evidence", "stage_index", "stage_nodes", "stage_started_at", "stage_acked_at"])
    node_ids, version = [node.pk for node in added], rollout.to_version
    impact_hooks.canary_stage(rollout=rollout, evidence=evidence, added=[node.name for node in added])
    transaction.on_commit(lambda: realtime.config_to_nodes(node_ids, version))
    # The added nodes now use the rollout's whitelist pins too.
    transaction.on_commit(lambda: realtime.policy_to_pool(pool))


def _record(rollout: Rollout, evidence: dict) -> None:
    """Keep the latest hold of a stage, not one per pass."""
    history = list(rollout.evidence)
    if history and history[-1].get("verdict") == "hold" and history[-1].get("stage") == evidence["stage"]:
        history[-1] = evidence
    else:
        history.append(evidence)
    rollout.evidence = history
    rollout.save(update_fields=["evidence"])


def _fail(rollout: Rollout, evidence: dict) -> None:
    rollout.evidence = [*rollout.evidence, evidence]
    rollout.save(update_fields=["evidence"])
    reason = "canary analysis failed: " + "; ".join(evidence["reasons"])
    _roll_back(rollout, actor=None, state=Rollout.State.ROLLED_BACK, reason=reason, evidence=evidence)


def _roll_back(
    rollout: Rollout, *, actor, state: str, reason: str, evidence: dict | None = None, audited: bool = True
) -> PoolRelease:
    """Every node of the pool back to the rollout's previous version (the others already run it: they ACK at once)."""
    pool = rollout.pool
    rollout.state, rollout.finished_at, rollout.outcome = state, timezone.now(), reason[:2000]
    rollout.save(update_fields=["state", "finished_at", "outcome"])
    # Back to the whitelists the baseline nodes kept using: those of the release before the rollout's.
    before = whitelist_pins.release_before(rollout.release)
    release = release_record(
        pool=pool,
        actor=actor,
        kind=PoolRelease.Kind.ROLLBACK,
        version=rollout.from_version,
        whitelist_versions=whitelist_pins.release_pins(before)
        if before
        else whitelist_pins.pins_for(rollout.from_version),
        reason=reason,
        audit_after={"rollout": rollout.pk, "canary_nodes": rollout.canary_nodes, "evidence": evidence},
        audited=audited,
    )
    transaction.on_commit(lambda: realtime.pool_released(release))
    return release


def _audit_state(rollout: Rollout) -> dict:
    return {"state": rollout.state, "stage": rollout.stage_index, "canary_nodes": rollout.canary_nodes}


# --- reads ----------------------------------------------------------------------------------------------


def rollout_broadcast(*, rollout_id: int) -> None:
    rollout = Rollout.objects.select_related("pool", "to_version__template", "from_version__template").filter(
        pk=rollout_id
    )
    rollout = rollout.first()
    if rollout is not None:
        realtime.rollout_updated(rollout_summary(rollout=rollout, now=timezone.now()))
