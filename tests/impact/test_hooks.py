"""Every changing service writes its impact record: canary stages, cleanups, intent models, warm-up datasets."""

import pytest
from django.utils import timezone

from controlplane.datasets.services.releases import intent_model_publish, intent_model_unpublish
from controlplane.datasets.services.warmup import pool_warmup_assign, warmup_dataset_create
from controlplane.impact.models import ImpactRecord
from controlplane.nodes.models import EngineNode
from controlplane.nodes.services import rollouts
from controlplane.nodes.services.cleanup import pool_cleanup_request
from controlplane.nodes.services.engine_nodes import node_create
from controlplane.nodes.services.pools import pool_publish
from tests.datasets.factories import easy_dataset, train_now
from tests.factories import pools, template_with_versions
from tests.nodes.test_rollouts import canary  # noqa: F401 - a fixture, found by name

pytestmark = pytest.mark.django_db


@pytest.fixture
def staging_on_v1(sre, agent):
    staging, _ = pools(sre)
    v1 = template_with_versions(agent, temperatures=(0.3,))[1][0]
    pool_publish(actor=sre, pool=staging, version=v1, reason="first")
    return staging, v1


def records(kind: str) -> list[ImpactRecord]:
    return list(ImpactRecord.objects.filter(kind=kind).order_by("id"))


def test_a_promoted_canary_stage_is_recorded_with_who_promoted_it(canary, sre):  # noqa: F811
    rollout = canary["rollout"]
    rollouts.rollout_promote(actor=sre, rollout=rollout, reason="looks good")
    [stage] = records("canary_stage")
    assert (stage.actor_name, stage.reason) == ("sre", "looks good")
    assert (stage.version_before, stage.version_after) == (canary["v1"], canary["v2"])
    assert stage.subject.startswith("stage 2 of 3: gpu-2 now run")
    assert stage.source == {"type": "rollout", "id": rollout.pk, "stage": 1}
    assert [c.path for c in stage.field_changes.all()] == ["temperature.strict"]


def test_a_pool_cleanup_is_recorded_with_its_nodes(sre, staging_on_v1):
    staging, v1 = staging_on_v1
    for i in (1, 2):
        node_create(actor=sre, name=f"gpu-{i}", pool=staging)
    EngineNode.objects.update(is_connected=True, last_seen_at=timezone.now())
    pool_cleanup_request(actor=sre, pool=staging, reason="fragmentation at 30 %")
    [cleanup] = records("cleanup")
    assert (cleanup.subject, cleanup.reason, cleanup.version_before) == (
        "memory cleanup of gpu-1, gpu-2",
        "fragmentation at 30 %",
        v1,
    )
    assert not cleanup.field_changes.exists()


def test_intent_model_publish_and_unpublish_are_recorded(sre, staging_on_v1):
    staging, _ = staging_on_v1
    model = train_now(sre, easy_dataset(sre, "shop", templates_per_label=2), epochs=1)
    intent_model_publish(actor=sre, pool=staging, intent_model=model, reason="better intents")
    intent_model_unpublish(actor=sre, pool=staging, reason="back to the built-in one")
    published, unpublished = records("intent_model_publish")
    assert published.subject == f"intent model: the built-in model → {model}"
    assert unpublished.subject == f"intent model: {model} → the built-in model"


def test_a_warmup_assignment_is_recorded(sre, staging_on_v1):
    staging, _ = staging_on_v1
    faq = warmup_dataset_create(
        actor=sre, name="faq", content=b"text,intent\nwhere is my order?,order_status\n", fmt="csv"
    )
    pool_warmup_assign(actor=sre, pool=staging, version=faq.versions.get(), reason="warm the order questions")
    [warmup] = records("warmup_change")
    assert warmup.subject == f"warm-up dataset: none → {faq.versions.get()}"
    assert warmup.reason == "warm the order questions"
