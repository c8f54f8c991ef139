"""Events about intent models (training progress to browsers, a pool's new model to its agents) and a pool's new
warmup dataset (to its agents)."""

from controlplane.datasets.models import IntentModel, WarmupDatasetVersion
from controlplane.datasets.selectors import active_intent_model
from controlplane.lib import realtime
from controlplane.nodes.models import Pool


def intent_model_progress(model: IntentModel) -> None:
    event: realtime.IntentModelProgress = {
        "type": "intent_model.progress",
        "model_id": model.pk,
        "dataset": model.dataset.name,
        "number": model.number,
        "status": model.status,
        "progress": model.progress,
        "progress_text": model.progress_text,
        "accuracy": model.accuracy,
    }
    realtime.send([realtime.intent_models_group()], event)


def intent_model_published(pool: Pool) -> None:
    """Tells the pool's agents which intent model to use now; they fetch the document by id and check its sha256."""
    model = active_intent_model(pool)
    event: realtime.IntentModelPublished = {
        "type": "intent_model.published",
        "pool": pool.name,
        "model_id": model.pk if model is not None else None,
        "sha256": model.sha256 if model is not None else None,
    }
    realtime.send([realtime.agents_group(pool.name)], event)


def warmup_assigned(pool: Pool, version: WarmupDatasetVersion) -> None:
    """Tells the pool's agents which warmup dataset version to replay after a cold start."""
    event: realtime.WarmupAssigned = {
        "type": "warmup.assigned",
        "pool": pool.name,
        "dataset": version.dataset.name,
        "version": version.number,
        "version_id": version.pk,
        "sha256": version.sha256,
        "messages": version.message_count,
    }
    realtime.send([realtime.agents_group(pool.name)], event)
