"""A candidate intent model against a pool's current one, on the reviewed messages and on recent sampled traffic.

Messages are classified with fictitious values in place of the node's placeholders, as a dataset built from the queue
holds them (engine_node/policy/masking.py). Reviewed messages carry a reviewer's label, so both models get an accuracy
there; the candidate may have been trained on some of them (a dataset built from the queue holds every label), which
the result counts so the page can say its figure there is optimistic. Recent traffic is every message the nodes
sampled in the last days (labelled or not, each counted as often as it was seen): no truth, so the figures are
agreement between the two models and how the share of each predicted label moves. Both sets are the unsure messages,
not all traffic.
"""

import json
from collections import Counter
from datetime import timedelta

from django.utils import timezone

from controlplane.datasets.models import IntentDataset, IntentModel
from controlplane.params.schema import INTENT_LABELS
from controlplane.reviews.models import ReviewItem
from engine_node.policy.intent import IntentClassifier
from engine_node.policy.masking import with_stand_ins

# Pure-Python classification costs a fraction of a millisecond a message: a few thousand keep the page under a second.
MAX_MESSAGES = 2000
RECENT_DAYS = 7


def classifier_of(model: IntentModel | None) -> IntentClassifier:
    """The classifier a model's file holds; the one built into the agent for None."""
    if model is None:
        return IntentClassifier.load()
    return IntentClassifier.from_document(json.loads(model.document_text), source=str(model))


def review_comparison(*, candidate: IntentModel, current: IntentModel | None) -> dict:
    """Side-by-side figures of `current` (None: the built-in model) and `candidate`; see the module docstring."""
    old, new = classifier_of(current), classifier_of(candidate)
    reviewed = list(
        ReviewItem.objects.filter(status=ReviewItem.Status.LABELLED)
        .order_by("-labelled_at")
        .values_list("text", "label")[:MAX_MESSAGES]
    )
    since = timezone.now() - timedelta(days=RECENT_DAYS)
    recent = list(
        ReviewItem.objects.filter(last_seen_at__gte=since)
        .order_by("-last_seen_at")
        .values_list("text", "seen_count")[:MAX_MESSAGES]
    )
    trained_texts = _dataset_texts(candidate.dataset_id)
    per_label = {label: {"reviewed": 0, "current_right": 0, "candidate_right": 0} for label in INTENT_LABELS}
    right_old = right_new = agree_reviewed = 0
    for masked, label in reviewed:
        text = with_stand_ins(masked)
        said_old, said_new = old.classify(text).label, new.classify(text).label
        right_old += said_old == label
        right_new += said_new == label
        agree_reviewed += said_old == said_new
        row = per_label[label]
        row["reviewed"] += 1
        row["current_right"] += said_old == label
        row["candidate_right"] += said_new == label
    shares_old, shares_new = Counter(), Counter()
    agree_recent = total_recent = 0
    for masked, seen in recent:
        text = with_stand_ins(masked)
        said_old, said_new = old.classify(text).label, new.classify(text).label
        shares_old[said_old] += seen
        shares_new[said_new] += seen
        agree_recent += seen * (said_old == said_new)
        total_recent += seen
    rows = []
    for label in INTENT_LABELS:
        row = per_label[label]
        share_old = shares_old[label] / total_recent if total_recent else None
        share_new = shares_new[label] / total_recent if total_recent else None
        rows.append(
            {
                "label": label,
                "reviewed": row["reviewed"],
                "current_recall": row["current_right"] / row["reviewed"] if row["reviewed"] else None,
                "candidate_recall": row["candidate_right"] / row["reviewed"] if row["reviewed"] else None,
                "current_share": share_old,
                "candidate_share": share_new,
                "share_change": share_new - share_old if total_recent else None,
            }
        )
    n = len(reviewed)
    return {
        "current": str(current) if current is not None else "built-in model",
        "candidate": str(candidate),
        "reviewed": n,
        "reviewed_in_training": sum(with_stand_ins(text) in trained_texts for text, _ in reviewed),
        "current_accuracy": right_old / n if n else None,
        "candidate_accuracy": right_new / n if n else None,
        "reviewed_agreement": agree_reviewed / n if n else None,
        "recent_messages": len(recent),
        "recent_sightings": total_recent,
        "recent_days": RECENT_DAYS,
        "recent_agreement": agree_recent / total_recent if total_recent else None,
        "per_label": rows,
    }


def _dataset_texts(dataset_id: int) -> set[str]:
    rows_json = IntentDataset.objects.filter(pk=dataset_id).values_list("rows_json", flat=True).first() or "[]"
    return {row[0] for row in json.loads(rows_json)}
