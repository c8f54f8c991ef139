"""Synthetic conversation logs shaped like the field report's six months of logs, deterministic by seed.

Reply lengths per intent are log-normal with the report's mean and P95 (order status 78 / 120, returns 145 / 210,
recommendations 210 / 350) and plausible ones for the other intents, mixed so that about 91 % of replies are at most
256 tokens and about 0.7 % longer than 512. First user messages are taken from the intent classifier's labelled
messages that the built-in model reads as their own intent (at or above its confidence floor), so the intent of every
conversation is known. Conversations carry start times (a Poisson arrival process) for replaying them, and token
counts (`tokens`, and OpenAI's `usage` on replies). The texts of replies are placeholders unless `full_text`.
"""

from __future__ import annotations

import gzip
import json
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from engine_node.policy.dataset import load_examples
from engine_node.policy.explain import estimate_tokens
from engine_node.policy.intent import IntentClassifier

# intent: (share of conversations, mean reply tokens, P95 reply tokens)
REPLY_SHAPES = {
    "order_status": (0.30, 78, 120),
    "return_refund": (0.20, 145, 210),
    "product_recommendation": (0.16, 210, 350),
    "payment_billing": (0.08, 95, 160),
    "coupon_promotion": (0.08, 120, 200),
    "account_privacy": (0.05, 110, 190),
    "legal_policy": (0.025, 380, 700),
    "copywriting": (0.05, 290, 500),
    "other": (0.055, 130, 230),
}
TURN_WEIGHTS = ((1, 0.60), (2, 0.25), (3, 0.10), (4, 0.03), (5, 0.02))
LONG_PASTE_SHARE = 0.015
START = datetime(2026, 6, 1, tzinfo=UTC).timestamp()
ARRIVALS_PER_S = 5.0
MESSAGES_PER_INTENT = 200


@dataclass(frozen=True)
class Shape:
    mu: float
    sigma: float


def lognormal_shape(mean: float, p95: float) -> Shape:
    """The log-normal with this mean and 95th percentile: mean = e^(mu + s^2/2), P95 = e^(mu + 1.645 s)."""
    z = 1.6448536269514722
    gap = math.log(p95 / mean)
    sigma = z - math.sqrt(z * z - 2 * gap)
    return Shape(mu=math.log(mean) - sigma * sigma / 2, sigma=sigma)


def intent_messages(per_intent: int = MESSAGES_PER_INTENT) -> dict[str, list[str]]:
    """Per intent, labelled messages the built-in classifier reads as that intent at or above 0.8 confidence."""
    classifier = IntentClassifier.load()
    found: dict[str, list[str]] = {label: [] for label in REPLY_SHAPES}
    for example in load_examples():
        bucket = found.get(example.label)
        if bucket is None or len(bucket) >= per_intent or len(example.text) > 120:
            continue
        reading = classifier.classify(example.text)
        if reading.label == example.label and reading.confidence >= 0.8:
            bucket.append(example.text)
    return found


def conversations(count: int, *, seed: int = 0, full_text: bool = False) -> Iterator[dict]:
    """`count` conversations as JSON Lines objects `{"conversation_id", "created_at", "intent", "messages"}`."""
    rng = random.Random(seed)
    messages = intent_messages()
    labels = list(REPLY_SHAPES)
    weights = [REPLY_SHAPES[label][0] for label in labels]
    shapes = {label: lognormal_shape(mean, p95) for label, (_, mean, p95) in REPLY_SHAPES.items()}
    turn_counts, turn_weights = zip(*TURN_WEIGHTS, strict=True)
    at = START
    for number in range(count):
        at += rng.expovariate(ARRIVALS_PER_S)
        intent = rng.choices(labels, weights)[0]
        context = rng.randint(150, 400)
        if rng.random() < LONG_PASTE_SHARE:
            context += rng.randint(1800, 6000)
        items = []
        for turn in range(rng.choices(turn_counts, turn_weights)[0]):
            asked = rng.choice(messages[intent] if turn == 0 else messages[rng.choice(labels)])
            asked_tokens = estimate_tokens(asked)
            context += asked_tokens
            shape = shapes[intent]
            reply_tokens = max(1, round(rng.lognormvariate(shape.mu, shape.sigma)))
            reply = "好" * reply_tokens if full_text else f"[reply of {reply_tokens} tokens]"
            items.append({"role": "user", "content": asked, "tokens": asked_tokens})
            items.append(
                {
                    "role": "assistant",
                    "content": reply,
                    "usage": {"prompt_tokens": context, "completion_tokens": reply_tokens},
                }
            )
            context += reply_tokens
        yield {
            "conversation_id": f"c{seed}-{number}",
            "created_at": datetime.fromtimestamp(round(at, 3), UTC).isoformat().replace("+00:00", "Z"),
            "intent": intent,
            "messages": items,
        }


def write_log(path: Path, count: int, *, seed: int = 0, compress: bool = False, full_text: bool = False) -> Path:
    """Write `count` conversations as JSON Lines (gzip-compressed with `compress`) to `path`."""
    opener = gzip.open if compress else open
    with opener(path, "wt", encoding="utf-8", newline="\n") as out:
        for conversation in conversations(count, seed=seed, full_text=full_text):
            out.write(json.dumps(conversation, ensure_ascii=False, separators=(",", ":")) + "\n")
    return Path(path)
