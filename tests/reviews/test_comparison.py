"""A candidate model against the current one on the review queue's messages, and on the model page."""

import pytest
from django.urls import reverse

from controlplane.reviews.comparison import classifier_of, review_comparison
from controlplane.reviews.models import ReviewItem
from controlplane.reviews.services import review_dataset_create, review_item_label
from tests.datasets.factories import easy_dataset, train_now
from tests.factories import pools
from tests.reviews.factories import ingest, node_in, sample

pytestmark = pytest.mark.django_db

LABELLED = {
    "the cup arrived broken, what are you going to do": "return_refund",
    "is this moisturiser ok for eczema": "product_recommendation",
    "where is my parcel": "order_status",
}


@pytest.fixture
def queue(users):
    staging, _ = pools(users["sre"])
    node = node_in(staging, users["sre"])
    ingest(node, *[sample(text) for text in LABELLED], sample("hmm ok"), sample("hmm ok"), sample("随便问问"))
    for text, label in LABELLED.items():
        review_item_label(actor=users["agent"], item=ReviewItem.objects.get(text=text), label=label)
    return staging


def test_figures_are_what_the_two_models_say_of_the_messages(queue, users):
    candidate = train_now(users["agent"], easy_dataset(users["agent"], "shop"), epochs=1)
    result = review_comparison(candidate=candidate, current=None)
    old, new = classifier_of(None), classifier_of(candidate)
    right_old = sum(old.classify(text).label == label for text, label in LABELLED.items())
    right_new = sum(new.classify(text).label == label for text, label in LABELLED.items())
    assert result["reviewed"] == 3 and result["reviewed_in_training"] == 0
    assert result["current_accuracy"] == pytest.approx(right_old / 3)
    assert result["candidate_accuracy"] == pytest.approx(right_new / 3)
    # Recent traffic: five distinct messages, six sightings ("hmm ok" twice).
    assert (result["recent_messages"], result["recent_sightings"]) == (5, 6)
    texts = [*LABELLED, "hmm ok", "hmm ok", "随便问问"]
    agree = sum(old.classify(t).label == new.classify(t).label for t in texts)
    assert result["recent_agreement"] == pytest.approx(agree / 6)
    rows = {row["label"]: row for row in result["per_label"]}
    assert sum(row["candidate_share"] for row in rows.values()) == pytest.approx(1.0)
    assert rows["return_refund"]["reviewed"] == 1
    assert all(
        row["share_change"] == pytest.approx(row["candidate_share"] - row["current_share"]) for row in rows.values()
    )


def test_a_model_compared_with_itself_agrees_everywhere(queue, users):
    model = train_now(users["agent"], easy_dataset(users["agent"], "shop"), epochs=1)
    result = review_comparison(candidate=model, current=model)
    assert result["reviewed_agreement"] == result["recent_agreement"] == 1.0
    assert all(row["share_change"] == 0 for row in result["per_label"])


def test_a_candidate_trained_on_the_reviewed_messages_is_flagged_as_optimistic(queue, users):
    base = easy_dataset(users["agent"], "shop")
    candidate = train_now(users["agent"], review_dataset_create(actor=users["agent"], base=base, name="shop-r2"), 1)
    result = review_comparison(candidate=candidate, current=None)
    assert result["reviewed_in_training"] == 3


def test_the_model_page_shows_both_side_by_side(queue, users, client):
    candidate = train_now(users["agent"], easy_dataset(users["agent"], "shop"), epochs=1)
    client.force_login(users["oncall"])
    url = reverse("dashboard:intent-model", args=["shop", candidate.number])
    page = client.get(url, {"compare_pool": "staging"}).content.decode()
    assert 'data-testid="review-comparison"' in page
    assert "Current: built-in model" in page and "Candidate: shop #1" in page
    assert "Accuracy on 3 reviewed messages" in page
