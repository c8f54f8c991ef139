"""Samples the messages the policy was unsure of for the control plane's review queue, masked before they leave.

A message is a candidate when the classifier's confidence is below the template's floor, when the runner-up label
is within MARGIN of the top one, or when an agent's override decided its tier. On the request path `offer()` does
O(1) work: a few comparisons, a token bucket, and an append of the (bounded) raw text to a bounded deque. Masking
(engine_node/policy/masking.py) and building the batch happen in the agent's once-a-second loop, off the request, and
the text is cut to what a reviewer sees only after it is masked: a phone number across the cut is masked whole.
"""

from __future__ import annotations

import time
from collections import deque

from engine_node.policy.masking import CONTEXT, mask
from engine_node.policy.rules import Decision

# A runner-up this close to the top label means the classifier could as well have said the other one.
MARGIN = 0.15
# The part of a message a reviewer sees (and the control plane accepts); the classifier itself reads its first and
# last 48 characters, the reviewer gets more of the context.
MAX_TEXT_CHARS = 500
# At most this many samples a minute per node, in bursts of up to BURST: a busy pool of ten nodes still fills a
# reviewer's hour (several hundred labels) without flooding the control plane.
RATE_PER_MINUTE = 30
BURST = 10
# Held while the control plane is away; the oldest are dropped first when it is full.
CAPACITY = 200
# Per message to the control plane (which refuses larger batches).
BATCH = 50
REASONS = ("below_floor", "close_runner_up", "override")


class ReviewSampler:
    """A token bucket and a bounded buffer of unsure decisions; `batch()` masks and hands them out."""

    def __init__(
        self,
        *,
        rate_per_minute: float = RATE_PER_MINUTE,
        burst: int = BURST,
        capacity: int = CAPACITY,
        clock=time.monotonic,
    ):
        self._rate_per_s = rate_per_minute / 60.0
        self._burst = float(burst)
        self._tokens = float(burst)
        self._clock = clock
        self._refilled_at = clock()
        self._pending: deque[tuple] = deque(maxlen=capacity)
        self.sampled = 0
        self.rate_limited = 0
        self.dropped = 0

    def reasons(self, decision: Decision) -> tuple[str, ...]:
        """Why a decision is worth a reviewer's look; empty when it is not."""
        reasons = []
        if decision.intent_source == "classifier" and decision.confidence is not None:
            floor = decision.confidence_floor
            if floor is not None and decision.confidence < floor:
                reasons.append("below_floor")
            if decision.runner_up_confidence is not None and (
                decision.confidence - decision.runner_up_confidence < MARGIN
            ):
                reasons.append("close_runner_up")
        if decision.tier_rule == "override":
            reasons.append("override")
        return tuple(reasons)

    def offer(self, text: str, decision: Decision) -> bool:
        """Keep the message for review when the decision was unsure and the rate allows; O(1), never raises."""
        reasons = self.reasons(decision)
        if not reasons or not text:
            return False
        now = self._clock()
        self._tokens = min(self._burst, self._tokens + (now - self._refilled_at) * self._rate_per_s)
        self._refilled_at = now
        if self._tokens < 1.0:
            self.rate_limited += 1
            return False
        self._tokens -= 1.0
        if len(self._pending) == self._pending.maxlen:
            self.dropped += 1
        # Raw, with the context the masking pass reads beyond the cut; masked and cut in batch().
        self._pending.append((text[: MAX_TEXT_CHARS + CONTEXT], decision, reasons))
        self.sampled += 1
        return True

    def __len__(self) -> int:
        return len(self._pending)

    def batch(self, limit: int = BATCH) -> list[dict]:
        """Up to `limit` of the oldest samples, masked, as the control plane's `review_samples` message lists them."""
        samples = []
        while self._pending and len(samples) < limit:
            text, decision, reasons = self._pending.popleft()
            samples.append(
                {
                    "text": mask(text, limit=MAX_TEXT_CHARS),
                    "intent": decision.intent if decision.intent_source == "classifier" else None,
                    "confidence": decision.confidence if decision.intent_source == "classifier" else None,
                    "runner_up": decision.runner_up,
                    "runner_up_confidence": decision.runner_up_confidence,
                    "reasons": list(reasons),
                    "tier": decision.tier,
                }
            )
        return samples
