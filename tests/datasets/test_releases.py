"""Publishing a model to a pool: gated by the pool's accuracy floor, audited, announced to the pool's agents."""

import json

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer

from controlplane.audit.models import AuditEntry
from controlplane.datasets import selectors
from controlplane.datasets.exceptions import AccuracyBelowFloor, ModelNotPublishable
from controlplane.datasets.models import IntentModel, IntentModelRelease
from controlplane.datasets.services.releases import intent_model_publish, intent_model_unpublish
from controlplane.datasets.services.training import intent_model_create
from controlplane.lib import realtime
from controlplane.lib.errors import Conflict, InvalidField, NotFound
from controlplane.nodes.services.pools import pool_publish
from controlplane.params.services.templates import template_create, template_version_create
from tests.datasets.factories import train_now
from tests.factories import pools

pytestmark = pytest.mark.django_db


def version_with_floor(actor, floor: float, name: str = "chat"):
    template = template_create(actor=actor, name=name)
    document = {"inference_params": {"intent": {"accuracy_floor": floor}, "max_tokens": {"whitelist": []}}}
    return template_version_create(actor=actor, template=template, document=document, base_number=None)


@pytest.fixture
def staging(sre):
    return pools(sre)[0]


@pytest.fixture
def good_model(agent, easy_dataset):
    model = train_now(agent, easy_dataset, epochs=2)
    assert model.accuracy >= 0.92
    return model


@pytest.fixture
def weak_model(agent, hard_dataset):
    model = train_now(agent, hard_dataset, epochs=2)
    assert 0.3 < model.accuracy < 0.92
    return model


def test_a_model_below_the_default_floor_is_refused_naming_accuracy_value_and_floor(sre, staging, weak_model):
    before = AuditEntry.objects.count()
    with pytest.raises(AccuracyBelowFloor) as caught:
        intent_model_publish(actor=sre, pool=staging, intent_model=weak_model, reason="try it")
    message = caught.value.message
    assert message.startswith(f"accuracy: hard #1 scored {weak_model.accuracy:.4f} on held-out messages")
    assert "below the intent.accuracy_floor 0.92 of pool staging" in message
    assert caught.value.status_code == 409
    assert caught.value.detail == {"accuracy": weak_model.accuracy, "floor": 0.92, "pool": "staging"}
    assert not IntentModelRelease.objects.exists()
    assert AuditEntry.objects.count() == before
    assert selectors.active_intent_model(staging) is None


def test_the_floor_is_the_pools_desired_version_s(sre, staging, weak_model):
    lenient = version_with_floor(sre, 0.3)
    pool_publish(actor=sre, pool=staging, version=lenient, reason="lenient floor")
    staging.refresh_from_db()
    assert selectors.pool_accuracy_floor(pool=staging) == 0.3
    release = intent_model_publish(actor=sre, pool=staging, intent_model=weak_model, reason="good enough here")
    assert release.is_active and selectors.active_intent_model(staging) == weak_model

    strict = template_version_create(
        actor=sre,
        template=lenient.template,
        document={"inference_params": {"intent": {"accuracy_floor": 0.99}, "max_tokens": {"whitelist": []}}},
        base_number=1,
    )
    pool_publish(actor=sre, pool=staging, version=strict, reason="strict floor")
    staging.refresh_from_db()
    intent_model_unpublish(actor=sre, pool=staging, reason="reset")
    with pytest.raises(AccuracyBelowFloor, match=r"floor 0.99 of pool staging \(its version chat v2\)"):
        intent_model_publish(actor=sre, pool=staging, intent_model=weak_model, reason="again")


def test_publish_above_the_floor_is_audited_and_becomes_the_active_model(sre, admin_user, staging, good_model):
    release = intent_model_publish(actor=sre, pool=staging, intent_model=good_model, reason="better on returns")
    assert selectors.active_intent_model(staging) == good_model
    entry = AuditEntry.objects.get(action="intent_model.publish")
    assert (entry.actor_name, entry.reason, entry.target_type, entry.target_id) == (
        "sre",
        "better on returns",
        "nodes.pool",
        str(staging.pk),
    )
    assert entry.before == {"intent_model": None}
    assert entry.after["intent_model"]["sha256"] == good_model.sha256
    assert entry.after["floor"] == 0.92

    with pytest.raises(Conflict, match="already uses easy #1"):
        intent_model_publish(actor=admin_user, pool=staging, intent_model=good_model, reason="again")

    back = intent_model_unpublish(actor=admin_user, pool=staging, reason="regression in prod")
    assert back.intent_model is None and back.is_active
    assert selectors.active_intent_model(staging) is None
    assert list(IntentModelRelease.objects.filter(pool=staging).values_list("is_active", flat=True)) == [True, False]
    release.refresh_from_db()
    assert not release.is_active
    entry = AuditEntry.objects.get(action="intent_model.unpublish")
    assert entry.before["intent_model"]["id"] == good_model.pk and entry.after == {"intent_model": None}
    with pytest.raises(Conflict, match="already uses the built-in model"):
        intent_model_unpublish(actor=admin_user, pool=staging, reason="twice")


def test_models_that_did_not_succeed_are_refused(agent, sre, staging, easy_dataset):
    queued = intent_model_create(actor=agent, dataset=easy_dataset, epochs=1)
    with pytest.raises(ModelNotPublishable, match="easy #1 is queued; only a model whose training succeeded"):
        intent_model_publish(actor=sre, pool=staging, intent_model=queued, reason="early")
    IntentModel.objects.filter(pk=queued.pk).update(status="failed")
    queued.refresh_from_db()
    with pytest.raises(ModelNotPublishable, match="is failed"):
        intent_model_publish(actor=sre, pool=staging, intent_model=queued, reason="early")
    with pytest.raises(InvalidField, match="reason: required"):
        intent_model_publish(actor=sre, pool=staging, intent_model=queued, reason=" ")
    assert not IntentModelRelease.objects.exists()


def test_the_document_selector_serves_compact_json_and_caches_it(sre, staging, good_model, django_assert_num_queries):
    selectors.intent_model_document_text.cache_clear()
    text = selectors.intent_model_document_text(good_model.pk)
    assert json.loads(text)["sha256"] == good_model.sha256
    assert ", " not in text[:200] and ": " not in text[:200]
    with django_assert_num_queries(0):
        assert selectors.intent_model_document_text(good_model.pk) is text
    with pytest.raises(NotFound):
        selectors.intent_model_document_text(10**9)


@pytest.mark.django_db(transaction=True)
def test_publishing_tells_the_pool_s_agents_after_commit(sre, agent, easy_dataset):
    staging = pools(sre)[0]
    model = train_now(agent, easy_dataset, epochs=2)

    async def scenario():
        layer = get_channel_layer()
        channel = await layer.new_channel()
        await layer.group_add(realtime.agents_group("staging"), channel)
        try:
            await database_sync_to_async(intent_model_publish)(actor=sre, pool=staging, intent_model=model, reason="go")
            published = await layer.receive(channel)
            await database_sync_to_async(intent_model_unpublish)(actor=sre, pool=staging, reason="back")
            reverted = await layer.receive(channel)
        finally:
            await layer.group_discard(realtime.agents_group("staging"), channel)
        return published, reverted

    published, reverted = async_to_sync(scenario)()
    event = {"type": "intent_model.published", "pool": "staging"}
    assert published == {**event, "model_id": model.pk, "sha256": model.sha256}
    assert reverted == {**event, "model_id": None, "sha256": None}
