"""What an agent needs beside its config: the pool's policy bundle and the intent model its gateway classifies with.

Unaudited reads for the agent connection: sent on hello when the agent reports something else, and after a change.
"""

import functools
import json

from controlplane.datasets.selectors import intent_model_document_text, pool_warmup_dataset, warmup_messages_text
from controlplane.nodes import whitelist_pins
from controlplane.nodes.models import Pool
from controlplane.operations.policy_bundle import policy_bundle
from engine_node.policy.intent import MODEL_PATH


@functools.cache
def builtin_intent_model_sha256() -> str:
    """The sha256 of the model shipped with the agent, which agents use while no model is published to their pool."""
    return json.loads(MODEL_PATH.read_text(encoding="utf-8"))["sha256"]


def policy_text(*, pool_name: str, node_name: str) -> tuple[str, str, dict | None]:
    """(bundle JSON text, its hash, the intent model reference in it) for a node of a pool (a canary node of a
    rollout gets the whitelists its release pinned)."""
    pool = Pool.objects.get(name=pool_name)
    bundle = policy_bundle(pool, canary=pool.is_production and whitelist_pins.is_canary_node(pool, node_name))
    return json.dumps(bundle, ensure_ascii=False), bundle["hash"], bundle["content"]["intent_model"]


def intent_model_text(*, model_id: int | None, sha256: str | None) -> str:
    """The `intent_model` message: the document of a published model, or null to go back to the built-in one."""
    if model_id is None:
        return json.dumps(
            {"type": "intent_model", "id": None, "sha256": builtin_intent_model_sha256(), "document": None}
        )

    document = intent_model_document_text(model_id)
    head = json.dumps({"type": "intent_model", "id": model_id, "sha256": sha256})
    # The ~0.7 MB document is spliced in as the stored text, not parsed and re-serialised per agent.
    return head[:-1] + ', "document": ' + document + "}"


def warmup_dataset_text(*, pool_name: str, agent_sha256: str) -> tuple[str, str]:
    """(the `warmup_dataset` message, the sha256 the agent holds after it) for an agent holding `agent_sha256`: the
    pool's version with its messages, only `current: true` when the agent already has it, or messages null when the
    pool has none assigned."""
    version = pool_warmup_dataset(Pool.objects.get(name=pool_name))
    if version is None:
        return json.dumps({"type": "warmup_dataset", "version_id": None, "sha256": "", "messages": None}), ""
    head = {"type": "warmup_dataset", "version_id": version.pk, "sha256": version.sha256}
    if version.sha256 == agent_sha256:
        return json.dumps({**head, "current": True}), version.sha256
    # Spliced in as the stored canonical text (its sha256 is the version's), not parsed and re-serialised per agent.
    return json.dumps(head)[:-1] + ', "messages": ' + warmup_messages_text(version.pk) + "}", version.sha256


def wanted_model_sha256(model_ref: dict | None) -> str:
    return model_ref["sha256"] if model_ref else builtin_intent_model_sha256()
