"""What the policy's decision changes on the way through the gateway: the body forwarded to the engine (the tier's
temperature, the max_tokens cap) and the X-Policy-* headers the client gets back (read by replays, explain and
people debugging a reply)."""

from engine_node.policy.rules import Decision


def apply_decision(body: dict, decision: Decision) -> dict:
    """The body forwarded to the engine: the policy's temperature and max_tokens replace the client's."""
    forwarded = dict(body)
    forwarded["temperature"] = decision.temperature
    forwarded.pop("max_completion_tokens", None)
    if decision.max_tokens is not None:
        forwarded["max_tokens"] = decision.max_tokens
    return forwarded


def decision_headers(decision: Decision) -> dict:
    headers = {
        "X-Policy-Tier": decision.tier,
        "X-Policy-Rule": decision.tier_rule,
        "X-Policy-Temperature": f"{decision.temperature:g}",
        "X-Policy-Max-Tokens": str(decision.max_tokens),
    }
    if decision.intent and decision.intent_source == "classifier":
        headers["X-Policy-Intent"] = f"{decision.intent};confidence={decision.confidence:.3f}"
    return headers
