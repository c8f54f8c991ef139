"""Reads of the review queue: the pending messages in review order, what was labelled, and the queue's counts."""

from django.db.models import Count, F, Q, QuerySet

from controlplane.lib.errors import InvalidField, NotFound
from controlplane.reviews.models import ReviewItem


def review_items(*, status: str = ReviewItem.Status.PENDING, pool: str | None = None) -> QuerySet[ReviewItem]:
    """Pending: oldest first (the order a reviewer works in); labelled: latest label first (what undo reaches)."""
    if status not in ReviewItem.Status.values:
        raise InvalidField("status", f"must be one of {', '.join(ReviewItem.Status.values)}")
    items = ReviewItem.objects.filter(status=status).select_related("pool", "labelled_by")
    if pool:
        items = items.filter(pool__name=pool)
    if status == ReviewItem.Status.LABELLED:
        return items.order_by("-labelled_at", "-pk")
    return items.order_by("first_seen_at", "pk")


def review_item_get(*, pk: int) -> ReviewItem:
    item = ReviewItem.objects.select_related("pool", "labelled_by").filter(pk=pk).first()
    if item is None:
        raise NotFound(f"review item {pk} does not exist")
    return item


def review_counts() -> dict:
    """Pending and labelled totals, and how many labels agreed with the classifier's prediction."""
    labelled = Q(status=ReviewItem.Status.LABELLED)
    return ReviewItem.objects.aggregate(
        pending=Count("pk", filter=Q(status=ReviewItem.Status.PENDING)),
        labelled=Count("pk", filter=labelled),
        agreed=Count("pk", filter=labelled & Q(label=F("predicted_intent"))),
    )
