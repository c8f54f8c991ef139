"""The policy bundle: runtime state a pool's gateways need beside the template, pushed to its agents.

The bundle carries what is not part of a template version: the scenario lists of the whitelists (pinned by the
release a production pool's node runs, the latest ones on a non-production pool: controlplane/nodes/whitelist_pins.py),
the conversation overrides in effect, the pool's degradation state, its published intent model and the gateway
client keys its nodes accept (as sha256 hashes).
Each section is built by its own function of the pool, so a new source replaces one function and nothing else.
During a canary rollout on a production pool, the canary nodes may pin other whitelist versions than the rest: the
push then carries a second bundle for them.
"""

import hashlib
import json
from collections.abc import Iterable

from django.apps import apps

from controlplane.lib import realtime
from controlplane.nodes import whitelist_pins
from controlplane.nodes.models import ClientKey, Pool, Rollout
from controlplane.operations.models import ConversationOverride
from controlplane.operations.selectors import active_overrides, degradation_state, speculative_allowed


def policy_bundle(
    pool: Pool, *, canary: bool = False, whitelists: dict[str, list[str]] | None = None, now=None
) -> dict:
    """`{"type": "policy", "hash", "content"}` for one pool's nodes (its canary nodes with `canary`); `hash` is the
    sha256 of the canonical content."""
    content = {
        "pool": pool.name,
        "whitelists": whitelists_section(pool, canary=canary) if whitelists is None else whitelists,
        "overrides": overrides_section(pool, now=now),
        "degradation": degradation_section(pool),
        "intent_model": intent_model_section(pool),
        "client_keys": client_keys_section(pool),
    }
    return {"type": "policy", "hash": content_hash(content), "content": content}


def content_hash(content: dict) -> str:
    canonical = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def whitelists_section(pool: Pool | None = None, *, canary: bool = False) -> dict[str, list[str]]:
    """Scenario lists by whitelist name: pinned on a production pool, the latest ones elsewhere (and with no pool)."""
    if pool is None:
        return whitelist_pins.scenario_lists(whitelist_pins.latest_versions())
    return whitelist_pins.pool_whitelists(pool, canary=canary)


def overrides_section(pool: Pool, *, now=None) -> list[dict]:
    """Overrides in effect on the pool, one per conversation, by conversation id.

    A conversation can hold a pool override and an all-pools override at once; the one set last wins,
    as a replacement within one scope does.
    """
    newest: dict[str, ConversationOverride] = {}
    for override in active_overrides(pool, now=now).order_by("created_at", "id"):
        newest[override.conversation_id] = override
    return [
        {
            "conversation": o.conversation_id,
            "tier": o.tier,
            "temperature": o.temperature,
            "reason": o.reason,
            "set_by": o.created_by.get_username(),
            "expires_at": o.expires_at.timestamp(),
        }
        for _, o in sorted(newest.items())
    ]


def degradation_section(pool: Pool) -> dict:
    """Whether the pool runs degraded, why and since when (epoch seconds), and whether its engines may run
    speculative decoding now (the agent restarts without it only when the control plane sends it a restart)."""
    state = degradation_state(pool)
    active = state is not None and state.is_active
    return {
        "active": active,
        "cause": state.cause if active else "",
        "reason": state.reason if active else "",
        "since": state.since.timestamp() if active else None,
        "speculative_decoding": speculative_allowed(pool, state),
    }


def intent_model_section(pool: Pool) -> dict | None:
    """The intent model published to the pool, by id and sha256, or None where the datasets app has none."""
    # Imported here, and only when installed: the bundle must build in a deployment without the datasets app.
    if not apps.is_installed("controlplane.datasets"):
        return None
    try:
        from controlplane.datasets.selectors import active_intent_model
    except ImportError:
        return None
    model = active_intent_model(pool=pool)
    return None if model is None else {"id": model.id, "sha256": model.sha256}


def client_keys_section(pool: Pool) -> list[dict]:
    """The live client and scrape keys of the pool, by name: hashes only, never a key (engine_node/client_keys.py)."""
    return [
        {
            "name": key.name,
            "prefix": key.key_prefix,
            "sha256": key.key_hash,
            "kind": key.kind,
            "business_tags": list(key.business_tags),
        }
        for key in ClientKey.objects.filter(pools=pool, revoked_at__isnull=True).order_by("name", "pk")
    ]


def policy_message(pool: Pool, *, latest: dict[str, list[str]] | None = None) -> realtime.PolicyPush:
    """The `policy.push` event for the pool's agents; `text` is the bundle as JSON, encoded once for all agents, and
    `canary` the canary nodes' own bundle while their whitelist pins differ from the rest of the pool's.

    `latest`: the latest scenario lists, computed once when many pools are pushed (non-production pools use them)."""
    bundle = policy_bundle(pool, whitelists=None if pool.is_production else latest)
    message: realtime.PolicyPush = {
        "type": "policy.push",
        "pool": pool.name,
        "hash": bundle["hash"],
        "text": json.dumps(bundle, ensure_ascii=False),
        "canary": None,
    }
    rollout = Rollout.objects.filter(pool_id=pool.pk, state__in=Rollout.ACTIVE).first() if pool.is_production else None
    if rollout is not None:
        canary = policy_bundle(pool, canary=True)
        if canary["hash"] != bundle["hash"]:
            message["canary"] = {
                "nodes": rollout.canary_nodes,
                "hash": canary["hash"],
                "text": json.dumps(canary, ensure_ascii=False),
            }
    return message


def push_policy(pools: Iterable[Pool] | None) -> None:
    """Send each pool's current bundle to its agents' group; None means every pool."""
    pools = Pool.objects.all() if pools is None else pools
    latest = whitelists_section()
    for pool in pools:
        realtime.send([realtime.agents_group(pool.name)], policy_message(pool, latest=latest))
