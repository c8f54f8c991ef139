"""The review queue's services: storing a node's batch, labelling, undoing, and the dataset built from labels."""

import pytest

from controlplane.audit.models import AuditEntry
from controlplane.lib.errors import Conflict, InvalidField
from controlplane.reviews import selectors, services
from controlplane.reviews.models import ReviewItem
from controlplane.reviews.services import review_dataset_create, review_item_label, review_item_undo
from engine_node.policy.masking import mask
from tests.datasets.factories import easy_dataset
from tests.factories import pools
from tests.reviews.factories import ingest, node_in, sample

pytestmark = pytest.mark.django_db


@pytest.fixture
def node(users):
    staging, _ = pools(users["sre"])
    return node_in(staging, users["sre"])


def test_a_batch_is_stored_one_item_per_distinct_masked_text(node):
    result = ingest(node, sample("where is my parcel"), sample("where is my parcel"), sample("is it ok for eczema"))
    assert (result.stored, result.repeated, result.refused) == (2, 1, 0)
    item = ReviewItem.objects.get(text="where is my parcel")
    assert (item.seen_count, item.pool.name, item.node_name, item.status) == (2, "staging", "gpu-1", "pending")
    assert (item.predicted_intent, item.confidence, item.runner_up, item.reasons) == (
        "other",
        0.41,
        "return_refund",
        ["below_floor"],
    )


def test_a_known_text_sampled_for_another_reason_gains_that_reason(node):
    ingest(node, sample("where is my parcel"))
    ingest(node, sample("where is my parcel", reasons=["override", "below_floor"]))
    item = ReviewItem.objects.get()
    assert (item.reasons, item.seen_count) == (["below_floor", "override"], 2)


def test_two_messages_that_differ_only_in_personal_data_are_one_item(node):
    ingest(node, sample("退款到哪了 手机13812345678"), sample("退款到哪了 手机13987654321"))
    [item] = ReviewItem.objects.all()
    assert item.text == "退款到哪了 手机<PHONE>" and item.seen_count == 2


def test_label_and_undo_are_audited_and_a_second_label_is_a_conflict(node, users):
    ingest(node, sample("the cup arrived broken, what are you going to do"))
    item = ReviewItem.objects.get()
    labelled = review_item_label(actor=users["agent"], item=item, label="return_refund")
    assert (labelled.status, labelled.label, labelled.agrees) == ("labelled", "return_refund", False)
    with pytest.raises(Conflict):
        review_item_label(actor=users["sre"], item=item, label="other")
    review_item_undo(actor=users["sre"], item=item)
    item.refresh_from_db()
    assert (item.status, item.label, item.labelled_by) == ("pending", "", None)
    with pytest.raises(Conflict):
        review_item_undo(actor=users["sre"], item=item)
    actions = list(
        AuditEntry.objects.filter(target_type__contains="review").order_by("id").values_list("action", "actor_name")
    )
    assert actions == [("review_item.label", "agent"), ("review_item.undo", "sre")]


def test_an_unknown_label_is_refused_by_name(node, users):
    ingest(node, sample("hello"))
    with pytest.raises(InvalidField, match="label"):
        review_item_label(actor=users["agent"], item=ReviewItem.objects.get(), label="refund")
    assert ReviewItem.objects.get().status == "pending"


def test_counts_and_queue_order(node, users):
    ingest(node, sample("first"), sample("second"), sample("third"))
    review_item_label(actor=users["agent"], item=ReviewItem.objects.get(text="second"), label="other")
    assert [i.text for i in selectors.review_items()] == ["first", "third"]
    assert [i.text for i in selectors.review_items(status="labelled")] == ["second"]
    assert selectors.review_counts() == {"pending": 2, "labelled": 1, "agreed": 1}


def test_a_new_dataset_version_holds_the_base_rows_and_every_label(node, users):
    base = easy_dataset(users["agent"], name="shop")
    text = next(row[0] for row in base.rows if mask(row[0]) == row[0])  # stored as is, so it replaces the base row
    ingest(node, sample("is this moisturiser ok for eczema"), sample(text), sample("still pending"))
    review_item_label(
        actor=users["agent"], item=ReviewItem.objects.get(text="is this moisturiser ok for eczema"), label="other"
    )
    review_item_label(actor=users["agent"], item=ReviewItem.objects.get(text=text), label="legal_policy")
    dataset = review_dataset_create(actor=users["agent"], base=base, name="shop-r2")
    rows = {row[0]: row for row in dataset.rows}
    assert rows["is this moisturiser ok for eczema"][1:] == [
        "other",
        "en",
        rows["is this moisturiser ok for eczema"][3],
    ]
    assert rows[text][1] == "legal_policy"  # the reviewer's label replaced the base's
    assert "still pending" not in rows
    assert dataset.row_count == base.row_count + 1
    assert dataset.has_templates == base.has_templates
    assert "2 reviewed messages" in dataset.description
    assert AuditEntry.objects.filter(action="intent_dataset.create", target_id=str(dataset.pk)).count() == 1


def test_a_dataset_needs_at_least_one_label(node, users):
    base = easy_dataset(users["agent"], name="shop")
    with pytest.raises(InvalidField, match="reviews"):
        review_dataset_create(actor=users["agent"], base=base, name="shop-r2")


def test_a_full_queue_refuses_new_texts_but_counts_known_ones(node, monkeypatch):
    monkeypatch.setattr(services, "MAX_PENDING_PER_POOL", 2)
    ingest(node, sample("a one"), sample("a two"))
    result = ingest(node, sample("a three"), sample("a one"))
    assert (result.stored, result.repeated, result.refused) == (0, 1, 1)
    assert "full" in result.errors[-1]
    assert ReviewItem.objects.count() == 2
