"""Override services: validation per field, replacement within a scope, revocation, expiry, audit and pushes."""

import json
from datetime import timedelta

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from controlplane.audit.models import AuditEntry
from controlplane.lib.errors import InvalidField
from controlplane.operations.exceptions import OverrideNotActive
from controlplane.operations.models import ConversationOverride
from controlplane.operations.selectors import active_overrides
from controlplane.operations.services import override_revoke, override_set

pytestmark = pytest.mark.django_db

GOOD = {"conversation": "conv-7f3a", "tier": "strict", "reason": "customer disputes a refund amount"}


def set_override(world, **changes):
    kwargs = {"actor": world["agent"], "pool": world["prod"], **GOOD, **changes}
    return override_set(**kwargs)


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        ({"conversation": ""}, "conversation", "required"),
        ({"conversation": None}, "conversation", "required"),
        ({"conversation": "x" * 129}, "conversation", "must be at most 128 characters, got 129"),
        ({"conversation": "conv 7"}, "conversation", "without whitespace"),
        ({"conversation": "conv-7\t"}, "conversation", "without whitespace"),
        ({"conversation": "conv\x00"}, "conversation", "printable"),
        ({"tier": None}, "tier", "required: give a tier (strict, normal, creative) or a temperature"),
        ({"tier": "frozen"}, "tier", "must be one of strict, normal, creative; got 'frozen'"),
        ({"temperature": 0.2}, "temperature", "give a tier or a temperature, not both"),
        ({"tier": None, "temperature": 2.5}, "temperature", "must be between 0 and 2, got 2.5"),
        ({"tier": None, "temperature": -0.1}, "temperature", "must be between 0 and 2"),
        ({"tier": None, "temperature": float("nan")}, "temperature", "must be a number"),
        ({"tier": None, "temperature": True}, "temperature", "must be a number"),
        ({"tier": None, "temperature": "0.3"}, "temperature", "must be a number"),
        ({"reason": "   "}, "reason", "required"),
        ({"reason": "x" * 2001}, "reason", "must be at most 2000 characters"),
        ({"expires_in_minutes": 0}, "expires_in_minutes", "must be between 1 and 1440"),
        ({"expires_in_minutes": 24 * 60 + 1}, "expires_in_minutes", "must be between 1 and 1440 (24 h), got 1441"),
        ({"expires_in_minutes": 1.5}, "expires_in_minutes", "whole number of minutes"),
    ],
)
def test_bad_input_names_the_field_and_stores_nothing(world, changes, field, message):
    before = AuditEntry.objects.count()
    with pytest.raises(InvalidField) as caught:
        set_override(world, **changes)
    assert caught.value.detail[0]["path"] == field
    assert caught.value.message.startswith(f"{field}: ")
    assert message in caught.value.message
    assert ConversationOverride.objects.count() == 0
    assert AuditEntry.objects.count() == before


def test_set_stores_the_override_with_its_expiry_and_audits_it(world):
    start = timezone.now()
    override = set_override(world, tier=None, temperature=0.15, expires_in_minutes=45)
    assert (override.pool, override.conversation_id, override.tier, override.temperature) == (
        world["prod"],
        "conv-7f3a",
        None,
        0.15,
    )
    assert timedelta(minutes=45) <= override.expires_at - start < timedelta(minutes=45, seconds=5)
    entry = AuditEntry.objects.get(action="override.set")
    assert (entry.actor_name, entry.reason, entry.target_repr) == (
        "agent",
        "customer disputes a refund amount",
        "conversation conv-7f3a on prod-main",
    )
    assert entry.before is None
    assert entry.after["temperature"] == 0.15 and entry.after["pool"] == "prod-main"


def test_default_expiry_is_thirty_minutes(world):
    override = set_override(world)
    assert timedelta(minutes=29, seconds=55) < override.expires_at - override.created_at <= timedelta(minutes=30)


def test_a_new_override_replaces_the_open_one_of_the_same_scope(world):
    first = set_override(world, tier="strict")
    other_pool = set_override(world, pool=world["staging"], tier="creative")
    everywhere = set_override(world, pool=None, tier="normal")
    second = set_override(world, tier=None, temperature=0.4, reason="back to a warmer tone", actor=world["sre"])
    first.refresh_from_db()
    assert first.revoked_at is not None and first.revoked_by == world["sre"]
    assert first.revoke_reason == "replaced by a new override"
    # Other scopes keep theirs.
    assert set(active_overrides()) == {other_pool, everywhere, second}
    entry = AuditEntry.objects.filter(action="override.set").first()
    assert entry.before["id"] == first.pk and entry.before["tier"] == "strict"
    assert entry.after["id"] == second.pk and entry.after["temperature"] == 0.4


def test_an_all_pools_override_is_replaced_by_the_next_all_pools_one(world):
    first = set_override(world, pool=None, tier="strict")
    second = set_override(world, pool=None, tier="creative")
    assert list(active_overrides()) == [second]
    first.refresh_from_db()
    assert first.revoked_at is not None


def test_the_database_refuses_two_open_overrides_of_one_scope(world):
    expires_at = timezone.now() + timedelta(minutes=5)
    for pool in (None, world["prod"]):
        row = {"pool": pool, "conversation_id": "c", "tier": "strict", "reason": "r", "expires_at": expires_at}
        ConversationOverride.objects.create(created_by=world["agent"], **row)
        with pytest.raises(IntegrityError), transaction.atomic():
            ConversationOverride.objects.create(created_by=world["agent"], **row)
    # Revoked rows do not count.
    ConversationOverride.objects.update(revoked_at=timezone.now())
    ConversationOverride.objects.create(created_by=world["agent"], **row)


@pytest.mark.parametrize(
    "values",
    [{"tier": "strict", "temperature": 0.2}, {"tier": None, "temperature": None}, {"tier": "hot", "temperature": None}],
)
def test_the_database_refuses_anything_but_exactly_one_known_tier_or_temperature(world, values):
    with pytest.raises(IntegrityError), transaction.atomic():
        ConversationOverride.objects.create(
            pool=None,
            conversation_id="c",
            reason="r",
            expires_at=timezone.now(),
            created_by=world["agent"],
            **values,
        )


def test_an_expired_override_is_inactive_and_a_new_one_closes_it(world):
    old = set_override(world)
    ConversationOverride.objects.filter(pk=old.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert list(active_overrides()) == []
    assert list(active_overrides(world["prod"], conversation="conv-7f3a")) == []
    new = set_override(world, tier="normal")
    old.refresh_from_db()
    # It ended on its own: the row records when, and no person revoked it.
    assert (old.revoked_at, old.revoked_by, old.revoke_reason) == (old.expires_at, None, "expired")
    assert AuditEntry.objects.filter(action="override.set").first().before is None
    assert list(active_overrides()) == [new]


def test_active_overrides_of_a_pool_include_the_all_pools_ones(world):
    prod = set_override(world, conversation="a")
    everywhere = set_override(world, pool=None, conversation="b")
    staging = set_override(world, pool=world["staging"], conversation="c")
    assert set(active_overrides(world["prod"])) == {prod, everywhere}
    assert set(active_overrides(world["staging"])) == {staging, everywhere}
    assert list(active_overrides(conversation="b")) == [everywhere]


def test_revoke_ends_the_override_and_audits_before_and_after(world):
    override = set_override(world)
    revoked = override_revoke(actor=world["sre"], override=override, reason="  customer calmed down ")
    assert revoked.revoked_by == world["sre"] and revoked.revoke_reason == "customer calmed down"
    assert list(active_overrides()) == []
    entry = AuditEntry.objects.get(action="override.revoke")
    assert (entry.actor_name, entry.reason) == ("sre", "customer calmed down")
    assert entry.before["revoked_at"] is None
    assert entry.after["revoked_at"] == revoked.revoked_at.isoformat()


def test_revoke_needs_a_reason(world):
    override = set_override(world)
    with pytest.raises(InvalidField, match="reason: required"):
        override_revoke(actor=world["sre"], override=override, reason=" ")
    assert list(active_overrides()) == [override]


def test_revoking_twice_or_after_expiry_is_refused(world):
    override = set_override(world)
    override_revoke(actor=world["sre"], override=override, reason="done")
    with pytest.raises(OverrideNotActive, match="already revoked") as caught:
        override_revoke(actor=world["sre"], override=override, reason="again")
    assert (caught.value.status_code, caught.value.code) == (409, "override_not_active")
    expired = set_override(world, conversation="conv-old")
    ConversationOverride.objects.filter(pk=expired.pk).update(expires_at=timezone.now() - timedelta(minutes=1))
    with pytest.raises(OverrideNotActive, match="already expired"):
        override_revoke(actor=world["sre"], override=expired, reason="late")
    assert AuditEntry.objects.filter(action="override.revoke").count() == 1


def test_set_and_revoke_push_the_bundle_after_commit_to_the_affected_pools(
    world, sent, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        override = set_override(world)
    assert sent == []
    for callback in callbacks:
        callback()
    [(groups, event)] = sent
    assert groups == ["agents.prod-main"]
    assert event["type"] == "policy.push" and event["pool"] == "prod-main"
    bundle = json.loads(event["text"])
    assert bundle["hash"] == event["hash"]
    assert [o["conversation"] for o in bundle["content"]["overrides"]] == ["conv-7f3a"]

    sent.clear()
    with django_capture_on_commit_callbacks(execute=True):
        override_revoke(actor=world["agent"], override=override, reason="resolved")
    [(groups, event)] = sent
    assert groups == ["agents.prod-main"]
    assert json.loads(event["text"])["content"]["overrides"] == []


def test_an_all_pools_override_reaches_every_pool(world, sent, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        set_override(world, pool=None)
    assert sorted(groups[0] for groups, _ in sent) == ["agents.prod-main", "agents.staging"]
    for _, event in sent:
        assert json.loads(event["text"])["content"]["overrides"][0]["conversation"] == "conv-7f3a"


def test_a_refused_set_pushes_nothing(world, sent, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True), pytest.raises(InvalidField):
        set_override(world, tier="frozen")
    assert sent == []
