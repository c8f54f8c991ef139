"""What the gateway keeps of a finished chat request: the node's sample window and its histograms."""

from engine_node import metrics
from engine_node.policy.rules import Decision
from engine_node.telemetry import RequestLog


def record_chat(
    requests: RequestLog,
    e2e: float,
    outcome: str,
    decision: Decision,
    *,
    usage: dict | None = None,
    ttft_s: float | None = None,
) -> None:
    """One finished chat request (`e2e` seconds end to end) into `requests` and the gateway's histograms."""
    tokens = None
    if usage:
        tokens = int(usage.get("prompt_tokens") or 0) + int(usage.get("completion_tokens") or 0)
    if outcome == "ok":
        metrics.CHAT_DURATION.observe(e2e)
        if ttft_s is not None:
            metrics.CHAT_TTFT.observe(ttft_s)
        if tokens is not None:
            metrics.CHAT_TOKENS.observe(tokens)
    source = decision.intent_source
    intent = (decision.intent or "none") if source == "classifier" else ("tag" if source == "business_tag" else "none")
    floor = decision.confidence_floor
    confidence = decision.confidence if source == "classifier" and floor is not None else None
    requests.record(
        e2e_s=e2e,
        outcome=outcome,
        ttft_s=ttft_s,
        tokens=tokens,
        intent=intent,
        tier=decision.tier,
        confidence=confidence,
        below_floor=confidence is not None and confidence < floor,
    )
