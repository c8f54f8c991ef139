"""The review queue: masked messages the gateways were unsure of, labelled with the keyboard; a dataset from them."""

from django.contrib import messages
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from controlplane.accounts.roles import Action
from controlplane.dashboard.access import page
from controlplane.datasets.models import IntentDataset
from controlplane.datasets.selectors import intent_dataset_get
from controlplane.lib.errors import DomainError
from controlplane.params.schema import INTENT_LABELS
from controlplane.reviews import selectors
from controlplane.reviews.models import ReviewItem
from controlplane.reviews.services import review_dataset_create

# Enough for an hour's work on one page; the rest follow on a reload.
PAGE_ITEMS = 300
REASON_TEXT = {
    "below_floor": "below the floor",
    "close_runner_up": "close runner-up",
    "override": "agent override",
}


@page()
def review_queue(request):
    """Pending messages oldest first, the labels with their keys, the latest labels (to undo) and the dataset form."""
    pool = request.GET.get("pool") or None
    pending = list(selectors.review_items(status=ReviewItem.Status.PENDING, pool=pool)[:PAGE_ITEMS])
    for item in pending:
        item.reason_text = ", ".join(REASON_TEXT.get(reason, reason) for reason in item.reasons)
    return render(
        request,
        "reviews/review_queue.html",
        {
            "pending": pending,
            "labelled": selectors.review_items(status=ReviewItem.Status.LABELLED, pool=pool)[:20],
            "counts": selectors.review_counts(),
            "labels": [(str(number), label) for number, label in enumerate(INTENT_LABELS, start=1)],
            "datasets": IntentDataset.objects.defer("rows_json").order_by("-created_at")[:50],
            "pool": pool,
        },
    )


@require_POST
@page(write_action=Action.INTENT_TRAIN)
def review_dataset(request):
    """Build a new intent dataset from a base dataset and every labelled message, then train it on its page."""
    try:
        dataset = review_dataset_create(
            actor=request.user,
            base=intent_dataset_get(name=request.POST.get("base", "")),
            name=request.POST.get("name", "").strip(),
        )
    except DomainError as exc:
        messages.error(request, exc.message)
        return redirect("dashboard:review-queue")
    messages.success(request, f"Dataset {dataset.name}: {dataset.row_count} rows; train it below.")
    return redirect("dashboard:intent-dataset", name=dataset.name)
