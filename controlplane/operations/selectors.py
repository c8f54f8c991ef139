"""Reads of conversation overrides (which are in effect now) and of pool degradation (state, history, timeline)."""

from datetime import datetime

from django.db.models import Q, QuerySet
from django.utils import timezone

from controlplane.nodes.models import Pool
from controlplane.nodes.selectors import pool_timeline
from controlplane.operations.models import ConversationOverride, DegradationEvent, PoolDegradation
from controlplane.params.schema import FIELDS_BY_PATH

HISTORY_LENGTH = 20


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


def pool_degradation(*, pool: Pool) -> PoolDegradation:
    """The pool's degradation state (an unsaved, inactive one where it never had any) with `recent_events`."""
    state = PoolDegradation.objects.select_related("changed_by").filter(pool=pool).first()
    state = state or PoolDegradation(pool=pool)
    state.pool = pool
    state.recent_events = list(DegradationEvent.objects.filter(pool=pool).select_related("actor")[:HISTORY_LENGTH])
    return state


def degraded_pools() -> QuerySet[PoolDegradation]:
    """The states of the pools degraded now, by pool name (the banner on every page)."""
    return PoolDegradation.objects.filter(is_active=True).select_related("pool").order_by("pool__name")


def pool_history(*, pool: Pool) -> list[dict]:
    """The pool's timeline, newest first: its releases and its degradation transitions, as
    `{"kind", "at", "release" | "degradation"}` entries."""
    entries = [{"kind": r.kind, "at": r.created_at, "release": r} for r in pool_timeline(pool=pool)]
    entries += [
        {"kind": f"degradation-{e.kind}", "at": e.at, "degradation": e}
        for e in DegradationEvent.objects.filter(pool=pool).select_related("actor")
    ]
    return sorted(entries, key=lambda entry: entry["at"], reverse=True)


def params_of(pool: Pool) -> dict:
    """The degradation, batch and speculative parameters of the pool's desired version, or the defaults."""
    if pool.desired_version is not None:
        return pool.desired_version.effective_params
    params: dict = {}
    for path in (
        "degradation.load_threshold", "degradation.exit_threshold", "degradation.enter_after_s",
        "degradation.exit_after_s", "degradation.speculative_decoding", "batch.max_queue",
        "batch.long_context_max_queue", "speculative.enabled",
    ):  # fmt: skip
        section, key = path.split(".")
        params.setdefault(section, {})[key] = FIELDS_BY_PATH[path].default
    return params


def speculative_allowed(pool: Pool, state: PoolDegradation | None) -> bool:
    """Whether the pool's engines may run speculative decoding now: not while degraded, unless the template keeps it."""
    if state is None or not state.is_active:
        return True
    return bool(params_of(pool)["degradation"]["speculative_decoding"])


def degradation_state(pool: Pool) -> PoolDegradation | None:
    return PoolDegradation.objects.filter(pool=pool).first()
