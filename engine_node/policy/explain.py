"""The explain reading of a message: what the policy decides for it and which rule decided each value.

Shared by the gateway's `POST /v1/policy/explain` and the dashboard's "try a message" box, so both say the same.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Collection

from engine_node.policy.rules import Policy

MAX_MESSAGE_CHARS = 20000
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$")
# The high byte of a UTF-16 code unit that is not one of the CJK blocks counted as a token each: U+3000-U+9FFF
# (CJK punctuation, kana, ideographs), U+F900-U+FAFF (compatibility ideographs), U+FF00-U+FFFF (full-width forms).
_NOT_CJK_HIGH_BYTES = bytes(b for b in range(256) if not (0x30 <= b <= 0x9F or b in (0xF9, 0xFA, 0xFF)))


class ExplainInvalid(ValueError):
    """A field of the explain request is wrong; `field` names it."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def estimate_tokens(text: str) -> int:
    """A tokenizer-free estimate: one token per CJK character, one per four other characters."""
    if text.isascii():
        return math.ceil(len(text) / 4)
    # Counted in C over the UTF-16 high bytes (a few ms for an 8 MiB body) rather than one match object per CJK
    # character (half a second). A character outside the BMP is a surrogate pair, neither half of which counts.
    cjk = len(text.encode("utf-16-be", "surrogatepass")[::2].translate(None, _NOT_CJK_HIGH_BYTES))
    return cjk + math.ceil((len(text) - cjk) / 4)


def checked_name(value: object, field: str, limit: int) -> str | None:
    """A business tag or conversation id: None when absent, else 1-limit characters of [A-Za-z0-9_.:-]."""
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) > limit or not _NAME.match(value):
        raise ExplainInvalid(field, f"must be 1-{limit} letters, digits or _.:- (starting with a letter or digit)")
    return value


def explain(policy: Policy, body: object, *, granted_tags: Collection[str] = ()) -> dict:
    """`{message, business_tag?, conversation_id?, max_tokens?, prompt_tokens?}` -> the decision, as JSON types, for a
    client key granted `granted_tags` (none: what a key without grants gets)."""
    if not isinstance(body, dict):
        raise ExplainInvalid("body", "must be a JSON object")
    message = body.get("message")
    if not isinstance(message, str) or not message.strip():
        raise ExplainInvalid("message", "must be a non-empty string")
    if len(message) > MAX_MESSAGE_CHARS:
        raise ExplainInvalid("message", f"at most {MAX_MESSAGE_CHARS} characters")
    client_max = body.get("max_tokens")
    if client_max is not None and (isinstance(client_max, bool) or not isinstance(client_max, int) or client_max < 1):
        raise ExplainInvalid("max_tokens", "must be a positive integer")
    prompt_tokens = body.get("prompt_tokens")
    if prompt_tokens is None:
        prompt_tokens = estimate_tokens(message) + 4
    elif isinstance(prompt_tokens, bool) or not isinstance(prompt_tokens, int) or prompt_tokens < 0:
        raise ExplainInvalid("prompt_tokens", "must be a non-negative integer")
    started = time.perf_counter()
    decision = policy.decide(
        message,
        prompt_tokens=prompt_tokens,
        client_max_tokens=client_max,
        business_tag=checked_name(body.get("business_tag"), "business_tag", 64),
        conversation=checked_name(body.get("conversation_id"), "conversation_id", 128),
        granted_tags=granted_tags,
    )
    elapsed_us = (time.perf_counter() - started) * 1e6
    classifier = policy.classifier.meta.get("sha256", "") if policy.classifier else ""
    return {"decision": decision.as_dict(), "decision_us": round(elapsed_us, 1), "intent_model": classifier}
