"""Reads of intent datasets and models (a pool's floor and active model, the cached model document) and of warmup
datasets (a pool's warmup version, the cached messages)."""

import functools
import json

from django.db.models import F, QuerySet

from controlplane.datasets.models import (
    IntentDataset,
    IntentModel,
    IntentModelRelease,
    PoolWarmup,
    WarmupDataset,
    WarmupDatasetVersion,
)
from controlplane.lib.errors import NotFound
from controlplane.nodes.models import Pool
from controlplane.params import schema

PREVIEW_ROWS = 20
# A document is ~0.7 MB and immutable, so a few of them stay in memory per process.
DOCUMENT_CACHE_SIZE = 8
WARMUP_PREVIEW_MESSAGES = 50
# Versions are immutable and at most 20 MiB (a log's top 200 queries are ~10 KB), so a few stay in memory per process.
WARMUP_CACHE_SIZE = 8


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


def warmup_dataset_get(*, name: str) -> WarmupDataset:
    dataset = WarmupDataset.objects.select_related("created_by").filter(name=name).first()
    if dataset is None:
        raise NotFound(f"dataset: no warmup dataset named {name!r}")
    return dataset


def warmup_versions(*, dataset: WarmupDataset | None = None) -> QuerySet[WarmupDatasetVersion]:
    """Versions newest first, without their messages (up to 50,000 of them; pages read a preview)."""
    versions = WarmupDatasetVersion.objects.select_related("dataset", "author").defer("messages_json")
    return versions.filter(dataset=dataset) if dataset is not None else versions


def warmup_latest_versions() -> QuerySet[WarmupDatasetVersion]:
    """Every dataset's newest version."""
    return warmup_versions().filter(number=F("dataset__latest_number"))


def warmup_version_get(*, dataset: WarmupDataset, number) -> WarmupDatasetVersion:
    version = warmup_versions(dataset=dataset).filter(number=number).first()
    if version is None:
        raise NotFound(f"version: warmup dataset {dataset.name} has no version {number}")
    return version


def warmup_preview(*, version: WarmupDatasetVersion, limit: int = WARMUP_PREVIEW_MESSAGES) -> list[dict]:
    """The first messages of a version as {text, intent, business_tag, count} (None where a message has none)."""
    messages = json.loads(warmup_messages_text(version.pk))
    return [
        {
            "text": message["text"],
            "intent": message.get("intent"),
            "business_tag": message.get("business_tag"),
            "count": message.get("count"),
        }
        for message in messages[:limit]
    ]


def pool_warmup_dataset(pool: Pool) -> WarmupDatasetVersion | None:
    """The version the pool's nodes replay to warm up; None when the pool has none assigned."""
    assignment = (
        PoolWarmup.objects.select_related("version__dataset")
        .defer("version__messages_json")
        .filter(pool=pool, is_active=True)
        .first()
    )
    return assignment.version if assignment is not None else None


def pool_warmups(*, pool: Pool | None = None) -> QuerySet[PoolWarmup]:
    """Assignments newest first, active and past."""
    assignments = PoolWarmup.objects.select_related("pool", "version__dataset", "assigned_by").defer(
        "version__messages_json"
    )
    return assignments.filter(pool=pool) if pool is not None else assignments


def pools_warmups() -> list[dict]:
    """Each pool with its active assignment (None when it has none), for the assign forms and the warmup page."""
    active = {assignment.pool_id: assignment for assignment in pool_warmups().filter(is_active=True)}
    return [{"pool": pool, "assignment": active.get(pool.pk)} for pool in Pool.objects.all()]


@functools.lru_cache(maxsize=WARMUP_CACHE_SIZE)
def warmup_messages_text(version_id: int) -> str:
    """A version's messages as compact JSON text (its sha256 is the version's), cached by id: versions never change."""
    text = WarmupDatasetVersion.objects.filter(pk=version_id).values_list("messages_json", flat=True).first()
    if text is None:
        # Raised, so not cached.
        raise NotFound(f"version: no warmup dataset version with id {version_id}")
    return text
