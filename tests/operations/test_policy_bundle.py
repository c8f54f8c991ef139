"""The policy bundle: exact content, a deterministic hash, and delivery to a pool's agent group."""

import hashlib
import json
import sys
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.apps import apps
from django.utils import timezone

from controlplane.operations.models import ConversationOverride
from controlplane.operations.policy_bundle import policy_bundle, push_policy
from controlplane.operations.services import override_revoke, override_set
from controlplane.params.services.whitelists import whitelist_create, whitelist_version_create

pytestmark = pytest.mark.django_db

IN_MEMORY = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}


def canonical_sha256(content: dict) -> str:
    text = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def test_bundle_of_a_quiet_pool(world):
    bundle = policy_bundle(world["staging"])
    assert bundle == {
        "type": "policy",
        "hash": canonical_sha256(bundle["content"]),
        "content": {
            "pool": "staging",
            "whitelists": {"legal": ["legal", "legal_policy"]},
            "overrides": [],
            "degradation": {"active": False, "cause": "", "reason": "", "since": None, "speculative_decoding": True},
            "intent_model": None,
            "client_keys": [],
        },
    }
    # A production pool's whitelists come with its releases: nothing published yet, none.
    assert policy_bundle(world["prod"])["content"]["whitelists"] == {}


def test_bundle_lists_the_overrides_in_effect_on_the_pool(world):
    strict = override_set(
        actor=world["agent"], pool=world["prod"], conversation="会话-42", tier="strict", reason="退款金额争议"
    )
    set_from = timezone.now()
    override_set(
        actor=world["sre"], pool=None, conversation="conv-a", temperature=0.5, reason="tone", expires_in_minutes=90
    )
    set_until = timezone.now()
    override_set(actor=world["agent"], pool=world["staging"], conversation="conv-b", tier="creative", reason="test")
    expired = override_set(actor=world["agent"], pool=world["prod"], conversation="conv-c", tier="normal", reason="x")
    ConversationOverride.objects.filter(pk=expired.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    overrides = policy_bundle(world["prod"])["content"]["overrides"]
    everywhere = ConversationOverride.objects.get(conversation_id="conv-a")
    assert overrides == [
        {
            "conversation": "conv-a",
            "tier": None,
            "temperature": 0.5,
            "reason": "tone",
            "set_by": "sre",
            "expires_at": everywhere.expires_at.timestamp(),
        },
        {
            "conversation": "会话-42",
            "tier": "strict",
            "temperature": None,
            "reason": "退款金额争议",
            "set_by": "agent",
            "expires_at": strict.expires_at.timestamp(),
        },
    ]
    assert isinstance(overrides[0]["expires_at"], float)
    assert set_from + timedelta(minutes=90) <= everywhere.expires_at <= set_until + timedelta(minutes=90)


def test_of_a_pool_and_an_all_pools_override_of_one_conversation_the_newest_wins(world):
    override_set(actor=world["agent"], pool=world["prod"], conversation="c1", tier="strict", reason="pool first")
    override_set(actor=world["agent"], pool=None, conversation="c1", tier="creative", reason="then everywhere")
    override_set(actor=world["agent"], pool=None, conversation="c2", tier="strict", reason="everywhere first")
    override_set(actor=world["agent"], pool=world["prod"], conversation="c2", tier="normal", reason="then pool")
    overrides = policy_bundle(world["prod"])["content"]["overrides"]
    assert [(o["conversation"], o["tier"]) for o in overrides] == [("c1", "creative"), ("c2", "normal")]
    # Staging sees only the all-pools ones.
    staging = policy_bundle(world["staging"])["content"]["overrides"]
    assert [(o["conversation"], o["tier"]) for o in staging] == [("c1", "creative"), ("c2", "strict")]


def test_whitelists_are_the_latest_versions_sorted_by_name(world):
    whitelist_create(actor=world["agent"], name="contracts", scenarios=["contract_terms"])
    whitelist_version_create(
        actor=world["agent"], whitelist=world["legal"], scenarios=["legal_policy", "legal"], base_number=1
    )
    whitelists = policy_bundle(world["staging"])["content"]["whitelists"]
    assert list(whitelists) == ["contracts", "legal"]
    assert whitelists == {"contracts": ["contract_terms"], "legal": ["legal_policy", "legal"]}


def test_hash_is_deterministic_and_follows_every_change(world):
    first = policy_bundle(world["prod"])
    assert policy_bundle(world["prod"]) == first
    assert policy_bundle(world["staging"])["hash"] != first["hash"], "the pool name is part of the content"
    override = override_set(actor=world["agent"], pool=world["prod"], conversation="c", tier="strict", reason="r")
    with_override = policy_bundle(world["prod"])
    assert with_override["hash"] != first["hash"]
    assert with_override["hash"] == canonical_sha256(with_override["content"])
    override_revoke(actor=world["agent"], override=override, reason="done")
    assert policy_bundle(world["prod"])["hash"] == first["hash"], "revoking returns to the same bundle"
    staging = policy_bundle(world["staging"])["hash"]
    whitelist_version_create(actor=world["agent"], whitelist=world["legal"], scenarios=["legal"], base_number=1)
    assert policy_bundle(world["staging"])["hash"] != staging, "non-production pools follow whitelist edits"
    assert policy_bundle(world["prod"])["hash"] == first["hash"], "production pools keep their release's pins"


def test_intent_model_comes_from_the_datasets_app_when_it_has_one(world, monkeypatch):
    class Model:
        id, sha256 = 7, "ab" * 32

    class Selectors:
        @staticmethod
        def active_intent_model(*, pool):
            return Model if pool.name == "prod-main" else None

    installed = apps.is_installed
    monkeypatch.setattr(apps, "is_installed", lambda name: name == "controlplane.datasets" or installed(name))
    monkeypatch.setitem(sys.modules, "controlplane.datasets.selectors", Selectors)
    assert policy_bundle(world["prod"])["content"]["intent_model"] == {"id": 7, "sha256": "ab" * 32}
    assert policy_bundle(world["staging"])["content"]["intent_model"] is None


def test_push_reaches_the_agent_group_of_each_pool(world, settings):
    settings.CHANNEL_LAYERS = IN_MEMORY
    layer = get_channel_layer()

    async def join(group: str) -> str:
        channel = await layer.new_channel()
        await layer.group_add(group, channel)
        return channel

    prod_agent, staging_agent = async_to_sync(join)("agents.prod-main"), async_to_sync(join)("agents.staging")
    override_set(actor=world["agent"], pool=world["prod"], conversation="c", tier="strict", reason="r")
    push_policy([world["prod"]])
    event = async_to_sync(layer.receive)(prod_agent)
    assert event["type"] == "policy.push"
    assert json.loads(event["text"]) == policy_bundle(world["prod"])
    assert event["hash"] == policy_bundle(world["prod"])["hash"]

    push_policy(None)
    received = {async_to_sync(layer.receive)(channel)["pool"] for channel in (prod_agent, staging_agent)}
    assert received == {"prod-main", "staging"}
