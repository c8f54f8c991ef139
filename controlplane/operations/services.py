"""Audited writes of conversation overrides: set (replacing an open one) and revoke; each pushes the policy."""

import math
from datetime import timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone

from controlplane.audit.services import audit_record, mutating_service
from controlplane.lib.errors import InvalidField, required_text
from controlplane.nodes.models import Pool
from controlplane.operations.exceptions import OverrideNotActive, OverrideRace
from controlplane.operations.models import ConversationOverride
from controlplane.operations.policy_bundle import push_policy
from controlplane.params.schema import TIERS

MAX_CONVERSATION_LENGTH = 128
MAX_REASON_LENGTH = 2000
DEFAULT_EXPIRY_MINUTES = 30
# An override is a stop-gap for one live conversation, not a policy: a day is the longest it may last.
MAX_EXPIRY_MINUTES = 24 * 60


@mutating_service
def override_set(
    *,
    actor,
    pool: Pool | None,
    conversation: str,
    tier: str | None = None,
    temperature: float | None = None,
    reason: str,
    expires_in_minutes: int = DEFAULT_EXPIRY_MINUTES,
) -> ConversationOverride:
    """Give one conversation a tier or a temperature until it expires; `pool` None means every pool.

    An open override of the same conversation and scope is revoked in the same transaction.
    """
    conversation = _conversation(conversation)
    tier, temperature = _setting(tier, temperature)
    reason = _reason(reason)
    minutes = _expiry(expires_in_minutes)
    now = timezone.now()
    with transaction.atomic():
        replaced = None
        for old in ConversationOverride.objects.select_for_update().filter(
            pool=pool, conversation_id=conversation, revoked_at__isnull=True
        ):
            if old.is_active(now):
                old.revoked_at, old.revoked_by, old.revoke_reason = now, actor, "replaced by a new override"
                replaced = old
            else:
                # It ended on its own: closing it records when it expired, not a person's revocation.
                old.revoked_at, old.revoke_reason = old.expires_at, "expired"
            old.save(update_fields=["revoked_at", "revoked_by", "revoke_reason"])
        try:
            with transaction.atomic():
                override = ConversationOverride.objects.create(
                    pool=pool,
                    conversation_id=conversation,
                    tier=tier,
                    temperature=temperature,
                    reason=reason,
                    expires_at=now + timedelta(minutes=minutes),
                    created_by=actor,
                )
        except IntegrityError:
            raise OverrideRace(
                f"conversation: another override of {conversation} was set at the same moment; reload and retry"
            ) from None
        audit_record(
            actor=actor,
            action="override.set",
            target=override,
            before=replaced.snapshot() if replaced else None,
            after=override.snapshot(),
            reason=reason,
        )
        transaction.on_commit(lambda: push_policy([pool] if pool else None))
    return override


@mutating_service
def override_revoke(*, actor, override: ConversationOverride, reason: str) -> ConversationOverride:
    """End an active override now; the conversation falls back to the template's rules."""
    reason = _reason(reason)
    now = timezone.now()
    with transaction.atomic():
        # No select_related: Postgres cannot lock the nullable side of the outer join to the pool.
        locked = ConversationOverride.objects.select_for_update().get(pk=override.pk)
        if locked.revoked_at is not None:
            raise OverrideNotActive(f"override: {locked} was already revoked")
        if locked.expires_at <= now:
            raise OverrideNotActive(f"override: {locked} already expired")
        before = locked.snapshot()
        locked.revoked_at, locked.revoked_by, locked.revoke_reason = now, actor, reason
        locked.save(update_fields=["revoked_at", "revoked_by", "revoke_reason"])
        audit_record(
            actor=actor, action="override.revoke", target=locked, before=before, after=locked.snapshot(), reason=reason
        )
        pool = locked.pool
        transaction.on_commit(lambda: push_policy([pool] if pool else None))
    return locked


def _conversation(value) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidField("conversation", "required: the conversation id")
    if len(value) > MAX_CONVERSATION_LENGTH:
        raise InvalidField("conversation", f"must be at most {MAX_CONVERSATION_LENGTH} characters, got {len(value)}")
    if not value.isprintable() or any(char.isspace() for char in value):
        raise InvalidField("conversation", "must be printable characters without whitespace")
    return value


def _setting(tier, temperature) -> tuple[str | None, float | None]:
    if tier is not None and temperature is not None:
        raise InvalidField("temperature", "give a tier or a temperature, not both")
    if tier is None and temperature is None:
        raise InvalidField("tier", f"required: give a tier ({', '.join(TIERS)}) or a temperature")
    if tier is not None and tier not in TIERS:
        raise InvalidField("tier", f"must be one of {', '.join(TIERS)}; got {tier!r}")
    if temperature is not None:
        if isinstance(temperature, bool) or not isinstance(temperature, int | float) or not math.isfinite(temperature):
            raise InvalidField("temperature", f"must be a number, got {temperature!r}")
        if not 0 <= temperature <= 2:
            raise InvalidField("temperature", f"must be between 0 and 2, got {temperature:g}")
        temperature = float(temperature)
    return tier, temperature


def _reason(value) -> str:
    reason = required_text("reason", value)
    if len(reason) > MAX_REASON_LENGTH:
        raise InvalidField("reason", f"must be at most {MAX_REASON_LENGTH} characters, got {len(reason)}")
    return reason


def _expiry(value) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidField("expires_in_minutes", f"must be a whole number of minutes, got {value!r}")
    if not 1 <= value <= MAX_EXPIRY_MINUTES:
        raise InvalidField("expires_in_minutes", f"must be between 1 and {MAX_EXPIRY_MINUTES} (24 h), got {value}")
    return value
