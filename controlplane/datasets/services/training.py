"""Queueing an intent model's training, and the training run itself (split, train, calibrate, evaluate, package).

The run reuses engine_node.policy's trainer, so a model trained here is the same kind the agent ships with.
"""

import json
import logging
import time

from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from controlplane.audit.services import audit_record, mutating_service
from controlplane.datasets import realtime
from controlplane.datasets.models import IntentDataset, IntentModel
from controlplane.lib import background
from controlplane.lib.errors import InvalidField
from engine_node.policy.dataset import Example, split_by_template, split_random
from engine_node.policy.intent import IntentClassifier, decode_weights, encode_weights
from engine_node.policy.train_intent import EPOCHS, evaluate, fit_temperature, model_document, train

logger = logging.getLogger(__name__)

MAX_EPOCHS = 50
# Share of the progress bar each phase takes: training the model, then training a second one to fit the
# confidence temperature on data it did not see; evaluation and packaging take the rest.
TRAIN_SHARE = (2, 60)
CALIBRATE_SHARE = (60, 92)


@mutating_service
def intent_model_create(*, actor, dataset: IntentDataset, epochs: int = EPOCHS) -> IntentModel:
    """Queue a training run on `dataset`; it starts once this transaction commits."""
    if isinstance(epochs, bool) or not isinstance(epochs, int) or not 1 <= epochs <= MAX_EPOCHS:
        raise InvalidField("epochs", f"must be an integer between 1 and {MAX_EPOCHS}, got {epochs!r}")
    with transaction.atomic():
        # The dataset row lock numbers concurrent runs on one dataset without gaps or clashes.
        locked = IntentDataset.objects.select_for_update().only("pk", "name").get(pk=dataset.pk)
        last = IntentModel.objects.filter(dataset=locked).aggregate(last=Max("number"))["last"] or 0
        model = IntentModel.objects.create(
            dataset=locked,
            number=last + 1,
            epochs=epochs,
            created_by=actor,
            progress_text="queued",
        )
        audit_record(
            actor=actor,
            action="intent_model.create",
            target=model,
            after={"dataset": locked.name, "number": model.number, "epochs": epochs},
        )
        transaction.on_commit(lambda: _enqueue(model.pk))
    return model


def _enqueue(model_id: int) -> None:
    """Hand a queued model to a worker; in embedded mode (eager Celery) to a daemon thread of this process.

    Eager tasks run inside the caller, and a full training takes about a minute: the HTTP request that queued it
    must not wait for it, so the eager run moves to its own thread.
    """
    background.start("controlplane.datasets.tasks.intent_model_train_task", model_id, name=f"intent-model-{model_id}")


def intent_model_train(*, model_id: int) -> IntentModel | None:
    """Run a queued model's training; None when the model vanished or another worker already claimed it.

    Progress goes to the row and to the browsers after every epoch. Any error marks the model failed.
    """
    now = timezone.now()
    claimed = IntentModel.objects.filter(pk=model_id, status=IntentModel.Status.QUEUED).update(
        status=IntentModel.Status.TRAINING, started_at=now, progress=1, progress_text="preparing the data"
    )
    if not claimed:
        return None
    model = IntentModel.objects.select_related("dataset").get(pk=model_id)
    realtime.intent_model_progress(model)
    try:
        _run(model)
    except Exception as exc:
        logger.exception("training intent model %s failed", model)
        model.status = IntentModel.Status.FAILED
        model.error = f"{type(exc).__name__}: {exc}"[:5000]
        model.progress_text = "failed"
        model.finished_at = timezone.now()
        model.save(update_fields=["status", "error", "progress_text", "finished_at"])
        realtime.intent_model_progress(model)
    return model


def _run(model: IntentModel) -> None:
    dataset = model.dataset
    examples = [Example(text, label, lang, template) for text, label, lang, template in dataset.rows]
    split_name, split = ("template", split_by_template) if dataset.has_templates else ("random", split_random)
    train_set, held_out = split(examples)
    if not train_set or not held_out:
        raise ValueError(f"the {split_name} split left {len(train_set)} to train on and {len(held_out)} to test")
    epochs = model.epochs
    started = time.perf_counter()

    def phase(share: tuple[int, int], text: str):
        low, high = share
        return lambda epoch: _progress(model, low + (high - low) * epoch // epochs, text.format(epoch=epoch))

    sizes = f"{len(train_set)} messages, {len(held_out)} held out ({split_name} split)"
    _progress(model, TRAIN_SHARE[0], f"training on {sizes}")
    trained = train(
        train_set,
        epochs=epochs,
        on_epoch=phase(TRAIN_SHARE, f"training: epoch {{epoch}}/{epochs} on {len(train_set)} messages"),
    )
    temperature = fit_temperature(
        train_set,
        split=split,
        epochs=epochs,
        on_epoch=phase(CALIBRATE_SHARE, f"calibrating confidence: epoch {{epoch}}/{epochs}"),
    )
    _progress(model, CALIBRATE_SHARE[1], f"evaluating on {len(held_out)} held-out messages")
    # Evaluate what will be shipped: float16 weights and rounded biases, exactly as the document stores them.
    shipped = IntentClassifier(
        labels=trained.labels,
        bias=[round(b, 6) for b in trained.bias],
        weights=decode_weights(
            encode_weights({k: list(v) for k, v in trained.weights.items()}, len(trained.labels)), len(trained.labels)
        ),
        temperature=temperature,
    )
    result = evaluate(shipped, held_out)
    document = model_document(
        shipped,
        split=split_name,
        n_train=len(train_set),
        accuracy=result["accuracy"],
        training_set_sha256=dataset.sha256,
        epochs=epochs,
    )
    labels = shipped.labels
    confusion = [[result["confusion"][truth][predicted] for predicted in labels] for truth in labels]
    model.evaluation = {
        "accuracy": result["accuracy"],
        "labels": labels,
        "per_label": {
            label: {**result["per_label"][label], "support": sum(confusion[i])} for i, label in enumerate(labels)
        },
        "confusion": confusion,
        "held_out": result["n"],
        "n_train": len(train_set),
        "split": split_name,
        "mean_confidence": result["mean_confidence"],
        "temperature": temperature,
        "epochs": epochs,
        "train_seconds": round(time.perf_counter() - started, 2),
    }
    model.accuracy = result["accuracy"]
    model.document_text = json.dumps(document, separators=(",", ":"))
    model.sha256 = document["sha256"]
    model.status = IntentModel.Status.SUCCEEDED
    model.progress = 100
    model.progress_text = f"done: accuracy {result['accuracy']:.4f} on {result['n']} held-out messages"
    model.finished_at = timezone.now()
    model.save(
        update_fields=[
            "evaluation",
            "accuracy",
            "document_text",
            "sha256",
            "status",
            "progress",
            "progress_text",
            "finished_at",
        ]
    )
    realtime.intent_model_progress(model)


def _progress(model: IntentModel, percent: int, text: str) -> None:
    model.progress = max(model.progress, min(percent, 99))
    model.progress_text = text
    IntentModel.objects.filter(pk=model.pk).update(progress=model.progress, progress_text=text)
    realtime.intent_model_progress(model)
