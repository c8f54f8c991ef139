"""Background work of intent models: the training run."""

from celery import shared_task

from controlplane.datasets.services.training import intent_model_train
from controlplane.lib.background import CLAIM_RETRIED, enqueue


# A database locked past its busy timeout, or gone, when the run claims its model: tried again (the claim is a
# conditional UPDATE, so a model another worker claimed meanwhile is a no-op). Training errors mark the model failed.
@shared_task(**CLAIM_RETRIED)
def intent_model_train_task(model_id: int) -> None:
    """Train one queued model; a vanished or already-claimed model is a no-op (see intent_model_train)."""
    intent_model_train(model_id=model_id)


def intent_model_train_enqueue(model_id: int) -> None:
    """Hand a queued model to a worker; in embedded mode (eager Celery) to a daemon thread of this process.

    Eager tasks run inside the caller, and a full training takes about a minute: the HTTP request that queued it
    must not wait for it, so the eager run moves to its own thread.
    """
    enqueue(intent_model_train_task, model_id, name=f"intent-model-{model_id}")
