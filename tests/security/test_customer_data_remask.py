"""Rows stored before the masker learned a form of customer data are masked again (reviews/0002 and
`manage.py remask_review_items`): no phone number or IBAN an older masker let through stays in the review queue, two
texts that now read the same become one item with every sighting, and a reviewer's label survives the merge."""

import hashlib
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from controlplane.reviews.models import ReviewItem
from controlplane.reviews.remask import remask_review_items
from controlplane.reviews.services import review_item_label
from tests.factories import pools
from tests.reviews.factories import ingest, node_in, sample

pytestmark = pytest.mark.django_db


def legacy_row(pool, text: str, *, seen: int, days_ago: int, reasons=("below_floor",)) -> ReviewItem:
    """A row as an older masker stored it: the text as it was let through, hashed as stored."""
    at = timezone.now() - timedelta(days=days_ago)
    return ReviewItem.objects.create(
        text_sha256=hashlib.sha256(text.encode()).hexdigest(), text=text, pool=pool, node_name="gpu-1",
        predicted_intent="other", confidence=0.4, reasons=list(reasons), tier="normal",
        first_seen_at=at, last_seen_at=at + timedelta(hours=1), seen_count=seen,
    )  # fmt: skip


def test_old_rows_are_masked_again_and_equal_texts_merge_keeping_sightings_and_label(sre, agent):
    pool = pools(sre)[0]
    node = node_in(pool, sre)
    ingest(node, sample("call me on 138.0000.1111 please"))  # masked on the way in today
    today = ReviewItem.objects.get()
    assert today.text == "call me on <PHONE> please"
    dotted = legacy_row(pool, "call me on 139.8765.4321 please", seen=3, days_ago=5, reasons=("disagreement",))
    iban = legacy_row(pool, "refund to DE89 3704 0044 0532 0130 00 now", seen=1, days_ago=2)
    review_item_label(actor=agent, item=dotted, label="return_refund")
    clean = legacy_row(pool, "where is my parcel", seen=2, days_ago=1)

    done = remask_review_items(ReviewItem)

    assert (done.checked, done.remasked, done.merged) == (4, 1, 1)
    texts = sorted(ReviewItem.objects.values_list("text", flat=True))
    assert texts == ["call me on <PHONE> please", "refund to <IBAN> now", "where is my parcel"]
    for item in ReviewItem.objects.all():
        assert item.text_sha256 == hashlib.sha256(item.text.encode()).hexdigest()
    merged = ReviewItem.objects.get(pk=today.pk)
    assert merged.seen_count == 1 + 3
    assert merged.first_seen_at == dotted.first_seen_at and merged.last_seen_at == today.last_seen_at
    assert merged.reasons == ["below_floor", "disagreement"]
    assert (merged.status, merged.label, merged.labelled_by) == ("labelled", "return_refund", agent)
    assert not ReviewItem.objects.filter(pk=dotted.pk).exists()
    assert ReviewItem.objects.get(pk=iban.pk).text == "refund to <IBAN> now"
    assert ReviewItem.objects.get(pk=clean.pk).text == "where is my parcel"

    out = StringIO()
    call_command("remask_review_items", stdout=out)  # a second pass finds nothing left to mask
    assert out.getvalue().strip() == "3 review texts checked: 0 masked again, 0 merged into an equal one"
