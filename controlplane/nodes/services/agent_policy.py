"""What an agent needs beside its config: the pool's policy bundle and the intent model its gateway classifies with.

Unaudited reads for the agent connection: sent on hello when the agent reports something else, and after a change.
"""

import functools
import json

from controlplane.nodes.models import Pool
from controlplane.operations.policy_bundle import policy_bundle
from engine_node.policy.intent import MODEL_PATH


@functools.cache
def builtin_intent_model_sha256() -> str:
    """The sha256 of the model shipped with the agent, which agents use while no model is published to their pool."""
    return json.loads(MODEL_PATH.read_text(encoding="utf-8"))["sha256"]


def policy_text(*, pool_name: str) -> tuple[str, str, dict | None]:
    """(bundle JSON text, its hash, the intent model reference in it) for a pool."""
    pool = Pool.objects.get(name=pool_name)
    bundle = policy_bundle(pool)
    return json.dumps(bundle, ensure_ascii=False), bundle["hash"], bundle["content"]["intent_model"]


def intent_model_text(*, model_id: int | None, sha256: str | None) -> str:
    """The `intent_model` message: the document of a published model, or null to go back to the built-in one."""
    if model_id is None:
        return json.dumps(
            {"type": "intent_model", "id": None, "sha256": builtin_intent_model_sha256(), "document": None}
        )
    from controlplane.datasets.selectors import intent_model_document_text

    document = intent_model_document_text(model_id)
    head = json.dumps({"type": "intent_model", "id": model_id, "sha256": sha256})
    # The ~0.7 MB document is spliced in as the stored text, not parsed and re-serialised per agent.
    return head[:-1] + ', "document": ' + document + "}"


def wanted_model_sha256(model_ref: dict | None) -> str:
    return model_ref["sha256"] if model_ref else builtin_intent_model_sha256()
