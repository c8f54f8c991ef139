"""Builders for intent datasets and models, through the services (a real upload, a real training run)."""

import time

from controlplane.datasets.models import IntentDataset, IntentModel
from controlplane.datasets.services.datasets import intent_dataset_create
from controlplane.datasets.services.training import intent_model_create, intent_model_train
from tests.datasets.data import as_csv, easy_rows


def easy_dataset(actor, name: str = "easy", templates_per_label: int = 3) -> IntentDataset:
    """A dataset any model trained for an epoch or two scores 1.0 on (see data.easy_rows)."""
    content = as_csv(easy_rows(templates_per_label))
    return intent_dataset_create(actor=actor, name=name, content=content, fmt="csv")


def train_now(actor, dataset: IntentDataset, epochs: int = 2) -> IntentModel:
    """Queue a model and run its training here; where the on_commit dispatch fired (transactional tests) and its
    thread claimed the run first, wait for that thread instead."""
    model = intent_model_create(actor=actor, dataset=dataset, epochs=epochs)
    intent_model_train(model_id=model.pk)
    deadline = time.monotonic() + 60
    model.refresh_from_db()
    while not model.is_finished and time.monotonic() < deadline:
        time.sleep(0.05)
        model.refresh_from_db()
    return model
