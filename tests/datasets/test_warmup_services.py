"""Warmup versions (numbered, stale base refused), pool assignments (one active, history kept, audited, told to the
pool's agents) and the selectors agents will read them through."""

import hashlib
import json

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.db import IntegrityError, transaction

from controlplane.asgi import application
from controlplane.audit.models import AuditEntry
from controlplane.datasets import selectors
from controlplane.datasets.exceptions import DatasetInvalid
from controlplane.datasets.models import PoolWarmup, WarmupDatasetVersion
from controlplane.datasets.services.warmup import pool_warmup_assign, warmup_dataset_create, warmup_version_create
from controlplane.lib import realtime
from controlplane.lib.errors import Conflict, InvalidField, NotFound
from controlplane.nodes.services.engine_nodes import node_create
from controlplane.params.exceptions import StaleBaseVersion
from tests.datasets.warmup_data import EXPECTED_TOP, MESSAGES, conversation_lines, messages_csv
from tests.factories import pools

pytestmark = pytest.mark.django_db


@pytest.fixture
def faq(agent):
    return warmup_dataset_create(actor=agent, name="faq", content=messages_csv(MESSAGES), fmt="csv")


@pytest.fixture
def two_pools(sre):
    return pools(sre)


def next_version(actor, dataset, base, **kwargs):
    kwargs.setdefault("content", conversation_lines())
    kwargs.setdefault("fmt", "jsonl")
    kwargs.setdefault("source", "conversation_log")
    return warmup_version_create(actor=actor, dataset=dataset, base_number=base, **kwargs)


def test_a_new_version_names_its_base_and_may_come_from_a_log(agent, sre, faq):
    v2 = next_version(sre, faq, 1, top_n=2, comment="festival log")
    assert (v2.number, v2.base_number, v2.comment, v2.author) == (2, 1, "festival log", sre)
    assert v2.messages == EXPECTED_TOP[:2]
    assert faq.latest_number == 2
    faq.refresh_from_db()
    assert faq.latest_number == 2
    assert faq.versions.get(number=1).messages == MESSAGES  # version 1 is untouched
    entry = AuditEntry.objects.get(action="warmup_dataset.version_create")
    assert entry.target_repr == "faq v2" and entry.reason == "festival log"
    assert (entry.before["number"], entry.before["source"]) == (1, "upload")
    assert (entry.after["number"], entry.after["source"], entry.after["messages"]) == (2, "conversation_log", 2)


def test_a_stale_base_is_a_409_naming_the_latest_and_stores_nothing(agent, sre, faq):
    next_version(sre, faq, 1)
    before = (WarmupDatasetVersion.objects.count(), AuditEntry.objects.count())
    with pytest.raises(StaleBaseVersion) as caught:
        next_version(agent, faq, 1, content=messages_csv(MESSAGES[:2]), fmt="csv", source="upload")
    assert caught.value.status_code == 409
    assert caught.value.code == "stale_base_version"
    assert caught.value.message == "base_version: version 1 is stale; the latest is 2"
    assert caught.value.detail["current_version"]["number"] == 2
    with pytest.raises(StaleBaseVersion, match="base_version: none given; the latest is 2"):
        next_version(agent, faq, None)
    assert (WarmupDatasetVersion.objects.count(), AuditEntry.objects.count()) == before


def test_a_bad_file_for_a_new_version_stores_nothing(agent, faq):
    with pytest.raises(DatasetInvalid):
        next_version(agent, faq, 1, content=b"text,intent\nhi,nope\n", fmt="csv", source="upload")
    faq.refresh_from_db()
    assert faq.latest_number == 1 and faq.versions.count() == 1


def test_assigning_keeps_one_active_assignment_per_pool_and_the_history(sre, admin_user, faq, two_pools):
    staging, prod = two_pools
    v1 = faq.versions.get(number=1)
    v2 = next_version(sre, faq, 1)
    assert selectors.pool_warmup_dataset(staging) is None
    first = pool_warmup_assign(actor=sre, pool=staging, version=v1, reason="first warmup")
    assert selectors.pool_warmup_dataset(staging) == v1
    second = pool_warmup_assign(actor=admin_user, pool=staging, version=v2, reason="festival queries")
    pool_warmup_assign(actor=sre, pool=prod, version=v1, reason="prod too")
    assert selectors.pool_warmup_dataset(staging) == v2
    assert selectors.pool_warmup_dataset(prod) == v1
    first.refresh_from_db()
    assert not first.is_active and second.is_active
    assert list(selectors.pool_warmups(pool=staging)) == [second, first]
    assert [a["assignment"].version for a in selectors.pools_warmups()] == [v1, v2]  # prod-main first
    entries = AuditEntry.objects.filter(action="warmup.assign").order_by("id")
    assert [(e.actor_name, e.target_repr, e.reason) for e in entries] == [
        ("sre", "staging", "first warmup"),
        ("admin", "staging", "festival queries"),
        ("sre", "prod-main", "prod too"),
    ]
    assert entries[1].before["warmup"]["number"] == 1 and entries[1].after["warmup"]["number"] == 2
    assert entries[0].before == {"warmup": None}
    assert entries[0].after["warmup"]["sha256"] == v1.sha256


def test_assigning_the_version_a_pool_already_has_or_without_a_reason_is_refused(sre, faq, two_pools):
    staging, _ = two_pools
    v1 = faq.versions.get(number=1)
    with pytest.raises(InvalidField, match="reason: required"):
        pool_warmup_assign(actor=sre, pool=staging, version=v1, reason="  ")
    pool_warmup_assign(actor=sre, pool=staging, version=v1, reason="go")
    with pytest.raises(Conflict, match="pool staging already warms up with faq v1"):
        pool_warmup_assign(actor=sre, pool=staging, version=v1, reason="again")
    assert PoolWarmup.objects.count() == 1
    assert AuditEntry.objects.filter(action="warmup.assign").count() == 1


def test_the_database_refuses_a_second_active_assignment(sre, faq, two_pools):
    staging, _ = two_pools
    v1 = faq.versions.get(number=1)
    pool_warmup_assign(actor=sre, pool=staging, version=v1, reason="go")
    with pytest.raises(IntegrityError), transaction.atomic():
        PoolWarmup.objects.create(pool=staging, version=v1, assigned_by=sre, reason="bypass", is_active=True)


def test_the_messages_selector_serves_the_exact_text_its_sha256_covers_and_caches_it(faq, django_assert_num_queries):
    selectors.warmup_messages_text.cache_clear()
    version = faq.versions.get()
    text = selectors.warmup_messages_text(version.pk)
    assert hashlib.sha256(text.encode("utf-8")).hexdigest() == version.sha256
    assert json.loads(text) == MESSAGES
    assert ", " not in text and '": ' not in text
    with django_assert_num_queries(0):
        assert selectors.warmup_messages_text(version.pk) is text
    with pytest.raises(NotFound):
        selectors.warmup_messages_text(10**9)


def test_preview_is_the_first_50_messages_with_every_column(agent):
    rows = [{"text": f"question number {i}", "intent": "other"} for i in range(60)]
    dataset = warmup_dataset_create(actor=agent, name="many", content=messages_csv(rows), fmt="csv")
    preview = selectors.warmup_preview(version=dataset.versions.get())
    assert len(preview) == 50
    assert preview[0] == {"text": "question number 0", "intent": "other", "business_tag": None, "count": None}


@pytest.mark.django_db(transaction=True)
def test_an_assignment_is_told_to_the_pool_s_agents_after_commit(sre, agent):
    staging, _ = pools(sre)
    version = warmup_dataset_create(actor=agent, name="faq", content=messages_csv(MESSAGES), fmt="csv").versions.get()

    async def scenario():
        layer = get_channel_layer()
        channel = await layer.new_channel()
        await layer.group_add(realtime.agents_group("staging"), channel)
        try:
            await database_sync_to_async(pool_warmup_assign)(actor=sre, pool=staging, version=version, reason="go")
            return await layer.receive(channel)
        finally:
            await layer.group_discard(realtime.agents_group("staging"), channel)

    assert async_to_sync(scenario)() == {
        "type": "warmup.assigned",
        "pool": "staging",
        "dataset": "faq",
        "version": 1,
        "version_id": version.pk,
        "sha256": version.sha256,
        "messages": len(MESSAGES),
    }


@pytest.mark.django_db(transaction=True)
def test_an_assignment_reaches_a_connected_agent_as_the_dataset_it_will_replay(sre, agent):
    """The agent gets the assigned version's messages with their sha256 and stays connected."""
    staging, _ = pools(sre)
    _, token = node_create(actor=sre, name="gpu-1", pool=staging)
    version = warmup_dataset_create(actor=agent, name="faq", content=messages_csv(MESSAGES), fmt="csv").versions.get()

    async def scenario():
        socket = WebsocketCommunicator(
            application, "/ws/agent/", headers=[(b"authorization", f"Bearer {token}".encode())]
        )
        ok, code = await socket.connect()
        assert ok, code
        assert (await socket.receive_json_from(timeout=5))["type"] == "welcome"
        await database_sync_to_async(pool_warmup_assign)(actor=sre, pool=staging, version=version, reason="go")
        dataset = await socket.receive_json_from(timeout=5)
        await socket.send_json_to({"type": "ping-after-warmup"})
        reply = await socket.receive_json_from(timeout=5)
        await socket.disconnect()
        return dataset, reply

    dataset, reply = async_to_sync(scenario)()
    assert (dataset["type"], dataset["sha256"]) == ("warmup_dataset", version.sha256)
    assert [m["text"] for m in dataset["messages"]] == [m["text"] for m in version.messages]
    assert reply == {"type": "error", "error": "unknown message type 'ping-after-warmup'"}
