"""Every write of the review queue: storing the nodes' samples, labelling and undoing, building a dataset version."""

import csv
import hashlib
import io
import logging
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from controlplane.audit.services import audit_record, mutating_service
from controlplane.datasets.models import IntentDataset
from controlplane.datasets.services.datasets import intent_dataset_create
from controlplane.lib.errors import Conflict, InvalidField
from controlplane.nodes.models import EngineNode
from controlplane.params.schema import INTENT_LABELS
from controlplane.reviews.models import ReviewItem
from controlplane.reviews.samples import checked_batch
from engine_node.policy.dataset import REVIEWED_TEMPLATE_PREFIX
from engine_node.policy.masking import with_stand_ins

log = logging.getLogger(__name__)

# A pool's queue holds at most this many unlabelled messages; past it, new ones are refused (counted and logged), so
# a node that floods distinct texts fills a bounded table, and reviewers are not buried under more than a week's work.
MAX_PENDING_PER_POOL = 5000


@dataclass(frozen=True)
class IngestResult:
    """What became of one batch: new items, sightings of known ones, samples refused (and why, the first few)."""

    stored: int
    repeated: int
    refused: int
    errors: tuple[str, ...]


def text_digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def review_samples_ingest(*, node_id: int, samples: object) -> IngestResult | None:
    """Store a node's batch of masked samples, one item per distinct text; None when the node has gone."""
    node = EngineNode.objects.select_related("pool").filter(pk=node_id).first()
    if node is None:
        return None
    good, errors = checked_batch(samples)
    invalid = len(errors)
    pending = ReviewItem.objects.filter(pool=node.pool, status=ReviewItem.Status.PENDING).count()
    now = timezone.now()
    stored = repeated = full = 0
    for sample in good:
        digest = text_digest(sample.text)
        if _seen_again(digest, sample.reasons, now):
            repeated += 1
            continue
        if pending >= MAX_PENDING_PER_POOL:
            full += 1
            continue
        try:
            with transaction.atomic():
                ReviewItem.objects.create(
                    text_sha256=digest,
                    text=sample.text,
                    pool=node.pool,
                    node_name=node.name,
                    predicted_intent=sample.intent,
                    confidence=sample.confidence,
                    runner_up=sample.runner_up,
                    runner_up_confidence=sample.runner_up_confidence,
                    reasons=list(sample.reasons),
                    tier=sample.tier,
                    first_seen_at=now,
                    last_seen_at=now,
                )
        except IntegrityError:  # another process stored the same text a moment ago
            _seen_again(digest, sample.reasons, now)
            repeated += 1
            continue
        stored += 1
        pending += 1
    if full:
        errors.append(f"the review queue of pool {node.pool.name} is full ({MAX_PENDING_PER_POOL} pending)")
    if errors:
        log.warning("node %s: %d review sample(s) refused: %s", node.name, len(errors), "; ".join(errors[:3]))
    return IngestResult(stored=stored, repeated=repeated, refused=invalid + full, errors=tuple(errors[:5]))


def _seen_again(digest: str, reasons: tuple[str, ...], now) -> bool:
    """Count another sighting of a known text, adding any new reason it was sampled for; False for a new text."""
    known = ReviewItem.objects.filter(text_sha256=digest).values_list("pk", "reasons").first()
    if known is None:
        return False
    pk, stored = known
    changes = {"seen_count": F("seen_count") + 1, "last_seen_at": now}
    added = [reason for reason in reasons if reason not in stored]
    if added:
        # Two processes adding different reasons at once may keep one of them: a reason is a hint, not a record.
        changes["reasons"] = [*stored, *added]
    ReviewItem.objects.filter(pk=pk).update(**changes)
    return True


def review_items_expire(*, now=None) -> int:
    """Delete the pending messages no gateway sampled again within REVIEW_PENDING_RETENTION_S; labelled ones stay.
    Returns how many went. Upkeep, like metric retention: no audit entry (nobody decided anything)."""
    cutoff = (now or timezone.now()) - timedelta(seconds=settings.REVIEW_PENDING_RETENTION_S)
    deleted, _ = ReviewItem.objects.filter(status=ReviewItem.Status.PENDING, last_seen_at__lt=cutoff).delete()
    return deleted


@mutating_service
def review_item_label(*, actor, item: ReviewItem, label: str) -> ReviewItem:
    """Give a pending message its intent; a message labelled already is refused (undo it first)."""
    if not isinstance(label, str) or label not in INTENT_LABELS:
        raise InvalidField("label", f"must be one of {', '.join(INTENT_LABELS)}")
    with transaction.atomic():
        item = ReviewItem.objects.select_for_update().get(pk=item.pk)
        if item.status != ReviewItem.Status.PENDING:
            raise Conflict(f"item: already labelled {item.label!r}; undo that first")
        item.status, item.label = ReviewItem.Status.LABELLED, label
        item.labelled_by, item.labelled_at = actor, timezone.now()
        item.save(update_fields=["status", "label", "labelled_by", "labelled_at"])
        audit_record(
            actor=actor,
            action="review_item.label",
            target=item,
            before={"status": "pending", "predicted_intent": item.predicted_intent, "confidence": item.confidence},
            after={"status": "labelled", "label": label, "agrees": item.agrees},
        )
    return item


@mutating_service
def review_item_undo(*, actor, item: ReviewItem) -> ReviewItem:
    """Put a labelled message back in the queue, unlabelled (a mistaken key press)."""
    with transaction.atomic():
        item = ReviewItem.objects.select_for_update().get(pk=item.pk)
        if item.status != ReviewItem.Status.LABELLED:
            raise Conflict("item: is not labelled")
        before = {"status": "labelled", "label": item.label, "labelled_by": getattr(item.labelled_by, "username", "")}
        item.status, item.label, item.labelled_by, item.labelled_at = ReviewItem.Status.PENDING, "", None, None
        item.save(update_fields=["status", "label", "labelled_by", "labelled_at"])
        audit_record(actor=actor, action="review_item.undo", target=item, before=before, after={"status": "pending"})
    return item


def review_dataset_create(*, actor, base: IntentDataset, name: str) -> IntentDataset:
    """A new intent dataset: the rows of `base` and every labelled message, each its own template (so the by-template
    held-out split keeps working); stored, checked and audited as an upload is (intent_dataset_create)."""
    labelled = list(ReviewItem.objects.filter(status=ReviewItem.Status.LABELLED).order_by("labelled_at", "pk"))
    if not labelled:
        raise InvalidField("reviews", "no labelled messages yet: label some in the review queue first")
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["text", "label", "lang", "template"])
    reviewed_texts = {with_stand_ins(item.text) for item in labelled}
    for text, label, lang, template in base.rows:
        if text not in reviewed_texts:  # a reviewer's label replaces whatever the base said of the same text
            writer.writerow([text, label, lang, template])
    for item in labelled:
        # Trained on as the gateway will read such a message: fictitious values where the node masked real ones.
        text = with_stand_ins(item.text)
        template = f"{REVIEWED_TEMPLATE_PREFIX}{item.pk}" if base.has_templates else ""
        writer.writerow([text, item.label, _lang(item.text), template])
    description = f"{base.name} + {len(labelled)} reviewed messages"
    return intent_dataset_create(actor=actor, name=name, content=out.getvalue(), fmt="csv", description=description)


def _lang(text: str) -> str:
    return "zh" if any("\u4e00" <= char <= "\u9fff" for char in text) else "en"
