"""The review queue's retention: a pending message no gateway sampled again within REVIEW_PENDING_RETENTION_S is
deleted by the hourly beat entry; a labelled one is training data and stays, however old."""

from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from controlplane.audit.models import AuditEntry
from controlplane.reviews import tasks
from controlplane.reviews.models import ReviewItem
from controlplane.reviews.services import review_item_label, review_items_expire
from tests.factories import pools
from tests.reviews.factories import ingest, node_in, sample

pytestmark = pytest.mark.django_db


@pytest.fixture
def node(users):
    staging, _ = pools(users["sre"])
    return node_in(staging, users["sre"])


def test_old_pending_messages_expire_and_labelled_ones_stay(node, users, settings):
    settings.REVIEW_PENDING_RETENTION_S = 7 * 24 * 3600
    ingest(node, sample("stale question"), sample("stale but labelled"), sample("asked again lately"))
    now = timezone.now()
    ReviewItem.objects.update(last_seen_at=now - timedelta(days=8))
    ReviewItem.objects.filter(text="asked again lately").update(last_seen_at=now - timedelta(days=6))
    review_item_label(actor=users["agent"], item=ReviewItem.objects.get(text="stale but labelled"), label="other")
    audited = AuditEntry.objects.count()

    assert review_items_expire(now=now) == 1
    assert sorted(ReviewItem.objects.values_list("text", flat=True)) == ["asked again lately", "stale but labelled"]
    assert AuditEntry.objects.count() == audited  # upkeep, not a decision
    assert review_items_expire(now=now) == 0
    # Sampled again, a message's clock starts over: it stays while customers keep writing it.
    ingest(node, sample("asked again lately"))
    assert review_items_expire(now=now + timedelta(days=6)) == 0


def test_the_beat_runs_the_expiry_every_hour(node):
    entry = settings.CELERY_BEAT_SCHEDULE["reviews-expire"]
    assert (entry["task"], entry["schedule"]) == ("controlplane.reviews.tasks.review_items_expire_task", 3600.0)
    ingest(node, sample("stale question"))
    ReviewItem.objects.update(last_seen_at=timezone.now() - timedelta(seconds=settings.REVIEW_PENDING_RETENTION_S + 60))
    tasks.review_items_expire_task.apply()
    assert not ReviewItem.objects.exists()
