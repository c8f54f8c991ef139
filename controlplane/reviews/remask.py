"""Stored review texts masked again with today's masker (engine_node/policy/masking.py).

Messages are masked on the node and again when the control plane stores them, but a row stored before the masker
learned a form (phone numbers with dots or ideographic spaces, fullwidth digits, IBANs, grouped card numbers, ...)
keeps that customer data until it is masked again. `remask_review_items` does that for every row: run by the
migration that ships a stronger masker (reviews/0002) and by `manage.py remask_review_items` after any later one.

Two texts that differed only in what is now masked become one text: the row masked second merges into the one that
holds that text already, which keeps every sighting (counts added, first and last seen widened, reasons joined) and a
reviewer's label from either.
"""

from dataclasses import dataclass

from django.db import transaction
from django.db.models import Model

from controlplane.reviews.samples import MAX_STORED_CHARS
from controlplane.reviews.services import text_digest
from engine_node.policy.masking import mask


@dataclass(frozen=True)
class Remasked:
    checked: int
    remasked: int
    merged: int


def remask_review_items(model: type[Model]) -> Remasked:
    """Mask every stored text of `model` (ReviewItem, or its historical form in a migration) again."""
    checked = remasked = merged = 0
    for pk in model.objects.order_by("pk").values_list("pk", flat=True).iterator(chunk_size=500):
        checked += 1
        with transaction.atomic():
            item = model.objects.select_for_update().filter(pk=pk).first()
            if item is None:  # merged into an earlier row already
                continue
            masked = mask(item.text, limit=MAX_STORED_CHARS)
            if masked == item.text:
                continue
            digest = text_digest(masked)
            twin = model.objects.select_for_update().filter(text_sha256=digest).exclude(pk=pk).first()
            if twin is None:
                model.objects.filter(pk=pk).update(text=masked, text_sha256=digest)
                remasked += 1
                continue
            _merge(into=twin, item=item)
            merged += 1
    return Remasked(checked=checked, remasked=remasked, merged=merged)


def _merge(*, into, item) -> None:
    """`item`'s sightings (and label, when `into` has none) onto `into`, whose text is already the masked one."""
    into.seen_count += item.seen_count
    into.first_seen_at = min(into.first_seen_at, item.first_seen_at)
    into.last_seen_at = max(into.last_seen_at, item.last_seen_at)
    into.reasons = [*into.reasons, *(reason for reason in item.reasons if reason not in into.reasons)]
    if into.status == "pending" and item.status == "labelled":
        into.status, into.label = item.status, item.label
        into.labelled_by_id, into.labelled_at = item.labelled_by_id, item.labelled_at
    item.delete()
    into.save()
