"""A hostile node's review samples: every field is checked, a bad sample is refused by name and the rest kept, the
text is masked again whatever the node did, and a node can neither grow the queue without bound nor label anything.

The service tests call the real ingest service; the WebSocket test sends the same batches through the real ASGI
app, as an agent holding a valid node token would.
"""

import math

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator

from controlplane.asgi import application
from controlplane.nodes.services.engine_nodes import node_create
from controlplane.reviews import services
from controlplane.reviews.models import ReviewItem
from controlplane.reviews.samples import MAX_BATCH, BatchInvalid
from engine_node.review_sampling import MAX_TEXT_CHARS
from tests.factories import pools
from tests.metrics.conftest import agent_headers
from tests.reviews.factories import ingest, node_in, sample


@pytest.fixture
def node(users):
    staging, _ = pools(users["sre"])
    return node_in(staging, users["sre"])


HOSTILE = [
    ({"text": "x" * (MAX_TEXT_CHARS + 1)}, "text"),
    ({"text": ""}, "text"),
    ({"text": "   "}, "text"),
    ({"text": 12345}, "text"),
    ({"text": "nul \x00 byte"}, "text"),
    ({"text": "lone \ud800 surrogate"}, "text"),
    ({"intent": "<script>alert(1)</script>"}, "intent"),
    ({"intent": ["order_status"]}, "intent"),
    ({"runner_up": "drop table"}, "runner_up"),
    ({"confidence": 1.5}, "confidence"),
    ({"confidence": -0.1}, "confidence"),
    ({"confidence": math.nan}, "confidence"),
    ({"confidence": math.inf}, "confidence"),
    ({"confidence": True}, "confidence"),
    ({"confidence": "0.5"}, "confidence"),
    ({"runner_up_confidence": 10**400}, "runner_up_confidence"),
    ({"reasons": []}, "reasons"),
    ({"reasons": "below_floor"}, "reasons"),
    ({"reasons": ["below_floor", "below_floor"]}, "reasons"),
    ({"reasons": ["because I said so"]}, "reasons"),
    ({"reasons": ["below_floor"] * 10_000}, "reasons"),
    ({"tier": "godmode"}, "tier"),
    ({"status": "labelled"}, "status"),
    ({"label": "order_status"}, "label"),
    ({"pool": "prod-main"}, "pool"),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("change", "field"), HOSTILE, ids=[f"{f}-{i}" for i, (_, f) in enumerate(HOSTILE)])
def test_a_bad_field_refuses_that_sample_by_name_and_keeps_the_rest(node, change, field):
    result = ingest(node, sample("a good one"), {**sample("the bad one"), **change}, sample("another good one"))
    assert (result.stored, result.refused) == (2, 1)
    assert f"samples[1].{field}" in result.errors[0]
    assert sorted(ReviewItem.objects.values_list("text", flat=True)) == ["a good one", "another good one"]
    # A node reports; it cannot label, choose the pool or set the status.
    assert set(ReviewItem.objects.values_list("status", "label", "pool__name")) == {("pending", "", "staging")}


@pytest.mark.django_db
@pytest.mark.parametrize("batch", [None, "text", {"text": "x"}, 42, [sample(f"m{i}") for i in range(MAX_BATCH + 1)]])
def test_a_batch_that_is_not_a_list_of_at_most_the_limit_stores_nothing(node, batch):
    with pytest.raises(BatchInvalid, match="samples"):
        services.review_samples_ingest(node_id=node.pk, samples=batch)
    assert not ReviewItem.objects.exists()


@pytest.mark.django_db
def test_a_node_that_skipped_masking_stores_no_personal_data(node):
    ingest(
        node,
        sample("退款 手机13812345678 卡4111111111111111 身份证110101199003074578 寄到北京市朝阳区建国路88号"),
        sample("mail me at jane@example.com or +44 20 7946 0958, 123 Main St, order #A1234567"),
    )
    stored = " ".join(ReviewItem.objects.values_list("text", flat=True))
    for secret in ("13812345678", "4111111111111111", "110101199003074578", "建国路88号", "jane@", "7946", "Main St"):
        assert secret not in stored
    assert "退款" in stored and "order" in stored


@pytest.mark.django_db
def test_distinct_texts_fill_a_bounded_queue(node, monkeypatch):
    monkeypatch.setattr(services, "MAX_PENDING_PER_POOL", 30)
    for round_ in range(3):
        ingest(node, *[sample(f"flood {round_} {chr(97 + i)}") for i in range(MAX_BATCH)])
    assert ReviewItem.objects.count() == 30


@pytest.mark.django_db(transaction=True)
@pytest.mark.redis
def test_over_the_socket_a_bad_batch_is_answered_with_an_error_and_stores_nothing(users):
    staging, _ = pools(users["sre"])
    _, token = node_create(actor=users["sre"], name="gpu-1", pool=staging)

    async def scenario():
        socket = WebsocketCommunicator(application, "/ws/agent/", headers=agent_headers(token))
        ok, _ = await socket.connect()
        assert ok
        assert (await socket.receive_json_from(timeout=5))["type"] == "welcome"
        too_many = [sample(f"m{i}") for i in range(MAX_BATCH + 1)]
        await socket.send_json_to({"type": "review_samples", "samples": too_many})
        first = await socket.receive_json_from(timeout=10)
        mixed = [sample("ok 手机13812345678"), {**sample("x"), "text": ""}]
        await socket.send_json_to({"type": "review_samples", "samples": mixed})
        second = await socket.receive_json_from(timeout=10)
        await socket.disconnect()
        return first, second

    first, second = async_to_sync(scenario)()
    assert first["type"] == "error" and "at most" in first["error"]
    assert second["type"] == "error" and "samples[1].text" in second["error"]
    assert list(ReviewItem.objects.values_list("text", flat=True)) == ["ok 手机<PHONE>"]


@pytest.mark.django_db
def test_a_nodes_text_is_shown_as_text_on_the_queue_page(node, users, client):
    ingest(node, sample('<img src=x onerror="alert(1)"> refund </td><script>alert(2)</script>'))
    client.force_login(users["agent"])
    page = client.get("/intents/review/").content.decode()
    assert "<img src=x" not in page and "<script>alert(2)" not in page
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt; refund &lt;/td&gt;&lt;script&gt;" in page
