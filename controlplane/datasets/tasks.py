"""Background work of intent models: the training run."""

from celery import shared_task

from controlplane.datasets.services.training import intent_model_train
from controlplane.lib.background import CLAIM_RETRIED


# A database locked past its busy timeout, or gone, when the run claims its model: tried again (the claim is a
# conditional UPDATE, so a model another worker claimed meanwhile is a no-op). Training errors mark the model failed.
@shared_task(**CLAIM_RETRIED)
def intent_model_train_task(model_id: int) -> None:
    """Train one queued model; a vanished or already-claimed model is a no-op (see intent_model_train)."""
    intent_model_train(model_id=model_id)
