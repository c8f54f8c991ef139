"""Publishing an intent model to a pool (gated by the pool's accuracy floor), or returning it to the built-in one."""

from django.db import transaction

from controlplane.audit.services import audit_record, mutating_service
from controlplane.datasets import realtime
from controlplane.datasets.exceptions import AccuracyBelowFloor, ModelNotPublishable
from controlplane.datasets.models import IntentModel, IntentModelRelease
from controlplane.datasets.selectors import pool_accuracy_floor, pool_active_release
from controlplane.impact import hooks as impact_hooks
from controlplane.lib.errors import Conflict, required_text
from controlplane.nodes.models import Pool


def model_ref(model: IntentModel | None) -> dict | None:
    if model is None:
        return None
    return {
        "id": model.pk,
        "dataset": model.dataset.name,
        "number": model.number,
        "sha256": model.sha256,
        "accuracy": model.accuracy,
    }


@mutating_service
def intent_model_publish(*, actor, pool: Pool, intent_model: IntentModel, reason: str) -> IntentModelRelease:
    """Make `intent_model` the pool's gateway model; refused unless it trained successfully and meets the floor."""
    reason = required_text("reason", reason)
    with transaction.atomic():
        # The pool row lock orders concurrent releases to one pool; the partial unique constraint backs it up.
        locked = Pool.objects.select_for_update().get(pk=pool.pk)
        # Judge the model as stored now, not as the caller loaded it (it may have finished training since).
        intent_model = (
            IntentModel.objects.select_related("dataset")
            .defer("document_text", "dataset__rows_json")
            .get(pk=intent_model.pk)
        )
        if intent_model.status != IntentModel.Status.SUCCEEDED:
            raise ModelNotPublishable(
                f"model: {intent_model} is {intent_model.status}; only a model whose training succeeded "
                "can be published"
            )
        floor = pool_accuracy_floor(pool=locked)
        version = locked.desired_version
        if intent_model.accuracy < floor:
            source = f"its version {version}" if version is not None else "the schema default (no version yet)"
            raise AccuracyBelowFloor(
                f"accuracy: {intent_model} scored {intent_model.accuracy:.4f} on held-out messages, below the "
                f"intent.accuracy_floor {floor} of pool {locked.name} ({source})",
                detail={"accuracy": intent_model.accuracy, "floor": floor, "pool": locked.name},
            )
        release = _release(actor, locked, intent_model, reason, after_extra={"floor": floor})
    return release


@mutating_service
def intent_model_unpublish(*, actor, pool: Pool, reason: str) -> IntentModelRelease:
    """Return the pool's gateway to the intent model built into the agent."""
    reason = required_text("reason", reason)
    with transaction.atomic():
        locked = Pool.objects.select_for_update().get(pk=pool.pk)
        release = _release(actor, locked, None, reason, after_extra={})
    return release


def _release(actor, pool: Pool, model: IntentModel | None, reason: str, *, after_extra: dict) -> IntentModelRelease:
    current = pool_active_release(pool=pool)
    current_model = current.intent_model if current is not None else None
    if (current_model.pk if current_model else None) == (model.pk if model else None):
        what = str(model) if model is not None else "the built-in model"
        raise Conflict(f"model: pool {pool.name} already uses {what}")
    IntentModelRelease.objects.filter(pool=pool, is_active=True).update(is_active=False)
    release = IntentModelRelease.objects.create(
        pool=pool, intent_model=model, published_by=actor, reason=reason, is_active=True
    )
    audit_record(
        actor=actor,
        action="intent_model.publish" if model is not None else "intent_model.unpublish",
        target=pool,
        before={"intent_model": model_ref(current_model)},
        after={"intent_model": model_ref(model), **after_extra},
        reason=reason,
    )
    impact_hooks.intent_model(
        pool=pool, before=current_model, after=model, actor=actor, reason=reason, release_id=release.pk
    )
    transaction.on_commit(lambda: realtime.intent_model_published(pool))
    return release
