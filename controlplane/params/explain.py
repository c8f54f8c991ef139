"""The "try a message" reading of a template version: the gateway's own policy code run in the control plane.

It answers what a node of the chosen pool (its whitelists, overrides, degradation and intent model) would decide
for a message under this version, without sending anything to a node.
"""

import functools
import json

from controlplane.datasets.selectors import intent_model_document_text
from controlplane.lib.errors import InvalidField
from controlplane.nodes.models import Pool
from controlplane.operations.policy_bundle import policy_bundle, whitelists_section
from controlplane.params.models import TemplateVersion
from engine_node.policy.explain import ExplainInvalid, checked_name, explain
from engine_node.policy.intent import IntentClassifier
from engine_node.policy.patterns import PatternRejected
from engine_node.policy.rules import Policy


@functools.lru_cache(maxsize=4)
def _classifier(model_id: int | None) -> IntentClassifier:
    """The built-in model (None) or a published one, loaded once per process: models are immutable."""
    if model_id is None:
        return IntentClassifier.load()

    return IntentClassifier.from_document(json.loads(intent_model_document_text(model_id)), source=f"model {model_id}")


def intent_classifier(model_id: int | None) -> IntentClassifier:
    """The classifier a pool's gateways run: the built-in one (None) or a published model, cached per process."""
    return _classifier(model_id)


def version_explain(
    *, version: TemplateVersion, body: dict, pool: Pool | None = None, granted_tags: list[str] = ()
) -> dict:
    """The decision for `body` (`message`, `business_tag`, `conversation_id`, `max_tokens`, `prompt_tokens`) from a
    client key granted `granted_tags`."""
    if pool is not None:
        bundle = policy_bundle(pool)["content"]
    else:
        bundle = {"whitelists": whitelists_section(), "overrides": [], "intent_model": None}
    model = bundle.get("intent_model")
    try:
        # A version saved before strict patterns ran on RE2 may hold one that RE2 refuses: say which.
        policy = Policy(version.effective_params, bundle, _classifier(model["id"] if model else None))
    except PatternRejected as exc:
        raise InvalidField(exc.field, f"{exc.message}; nodes refuse this version") from None
    try:
        # Bounded like the gateway's: RE2 over the message's edges, the classifier over its first and last characters.
        granted = frozenset(checked_name(tag, "granted_tags", 64) for tag in granted_tags)
        result = explain(policy, body, granted_tags=granted)
    except ExplainInvalid as exc:
        raise InvalidField(exc.field, exc.message) from None
    return {"template": version.ref, "pool": pool.name if pool else None, **result}
