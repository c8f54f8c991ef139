"""Fixtures for intent datasets: small datasets uploaded through the service, and embedded-mode dispatch."""

import pytest

from controlplane.datasets.services.datasets import intent_dataset_create
from tests.datasets import factories
from tests.datasets.data import as_csv, hard_rows


@pytest.fixture(autouse=True)
def embedded_training(settings):
    """Dispatch as in embedded mode (a daemon thread), so no test leaves a training message in a Redis broker."""
    settings.CELERY_TASK_ALWAYS_EAGER = True


@pytest.fixture
def easy_dataset(agent):
    return factories.easy_dataset(agent)


@pytest.fixture
def hard_dataset(agent):
    return intent_dataset_create(actor=agent, name="hard", content=as_csv(hard_rows()), fmt="csv")
