"""Reads of conversation overrides: which are in effect now."""

from datetime import datetime

from django.db.models import Q, QuerySet
from django.utils import timezone

from controlplane.nodes.models import Pool
from controlplane.operations.models import ConversationOverride


def active_overrides(
    pool: Pool | None = None, *, conversation: str | None = None, now: datetime | None = None
) -> QuerySet[ConversationOverride]:
    """Unrevoked, unexpired overrides; with `pool`, those that apply to it (its own and the all-pools ones)."""
    now = now or timezone.now()
    overrides = ConversationOverride.objects.filter(revoked_at__isnull=True, expires_at__gt=now).select_related(
        "pool", "created_by"
    )
    if pool is not None:
        overrides = overrides.filter(Q(pool=pool) | Q(pool__isnull=True))
    if conversation is not None:
        overrides = overrides.filter(conversation_id=conversation)
    return overrides
