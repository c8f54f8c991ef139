"""Reads of intent datasets and models: a pool's accuracy floor and active model, and the cached model document."""

import functools
import json

from django.db.models import QuerySet

from controlplane.datasets.models import IntentDataset, IntentModel, IntentModelRelease
from controlplane.lib.errors import NotFound
from controlplane.nodes.models import Pool
from controlplane.params import schema

PREVIEW_ROWS = 20
# A document is ~0.7 MB and immutable, so a few of them stay in memory per process.
DOCUMENT_CACHE_SIZE = 8


def intent_dataset_get(*, name: str) -> IntentDataset:
    dataset = IntentDataset.objects.select_related("created_by").defer("rows_json").filter(name=name).first()
    if dataset is None:
        raise NotFound(f"dataset: no intent dataset named {name!r}")
    return dataset


def intent_dataset_preview(*, dataset: IntentDataset, limit: int = PREVIEW_ROWS) -> list[dict]:
    """The first rows of a dataset as {text, label, lang, template}."""
    rows = json.loads(IntentDataset.objects.values_list("rows_json", flat=True).get(pk=dataset.pk))
    return [
        {"text": text, "label": label, "lang": lang, "template": template}
        for text, label, lang, template in rows[:limit]
    ]


def intent_models(*, dataset: IntentDataset | None = None) -> QuerySet[IntentModel]:
    """Models newest first, without their documents (those are large and only the agent needs them)."""
    models = IntentModel.objects.select_related("dataset", "created_by").defer("document_text", "dataset__rows_json")
    return models.filter(dataset=dataset) if dataset is not None else models


def intent_model_get(*, dataset: IntentDataset, number) -> IntentModel:
    model = intent_models(dataset=dataset).filter(number=number).first()
    if model is None:
        raise NotFound(f"model: {dataset.name} has no model #{number}")
    return model


def pool_accuracy_floor(*, pool: Pool) -> float:
    """`intent.accuracy_floor` of the pool's desired template version (the schema default when it has none)."""
    version = pool.desired_version
    params = version.effective_params if version is not None else schema.effective({})
    return float(params["intent"]["accuracy_floor"])


def pool_active_release(*, pool: Pool) -> IntentModelRelease | None:
    return (
        IntentModelRelease.objects.select_related("intent_model__dataset", "published_by")
        .defer("intent_model__document_text", "intent_model__dataset__rows_json")
        .filter(pool=pool, is_active=True)
        .first()
    )


def active_intent_model(pool: Pool) -> IntentModel | None:
    """The model the pool's gateway should use; None means the model built into the agent."""
    release = pool_active_release(pool=pool)
    return release.intent_model if release is not None else None


def intent_model_releases(*, pool: Pool | None = None) -> QuerySet[IntentModelRelease]:
    releases = IntentModelRelease.objects.select_related("pool", "intent_model__dataset", "published_by").defer(
        "intent_model__document_text", "intent_model__dataset__rows_json"
    )
    return releases.filter(pool=pool) if pool is not None else releases


def pools_intent_models() -> list[dict]:
    """Each pool with its accuracy floor and active release, for the publish forms and the intents page."""
    releases = {release.pool_id: release for release in intent_model_releases().filter(is_active=True)}
    return [
        {"pool": pool, "floor": pool_accuracy_floor(pool=pool), "release": releases.get(pool.pk)}
        for pool in Pool.objects.select_related("desired_version__template")
    ]


@functools.lru_cache(maxsize=DOCUMENT_CACHE_SIZE)
def intent_model_document_text(model_id: int) -> str:
    """The model file of a succeeded model as compact JSON text, cached by id (it never changes once written)."""
    text = (
        IntentModel.objects.filter(pk=model_id, status=IntentModel.Status.SUCCEEDED)
        .values_list("document_text", flat=True)
        .first()
    )
    if not text:
        # Raised, so not cached: a model still training gets its document later.
        raise NotFound(f"model: no trained intent model with id {model_id}")
    return text
