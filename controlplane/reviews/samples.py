"""Checking a node's `review_samples` message field by field: a node is trusted to report, not to write anything.

Every sample is checked on its own; a bad one is refused with the field and the problem named, the good ones of the
same batch are kept. The text is masked again here (engine_node/policy/masking.py is idempotent), so a node that
skipped its own masking still stores no phone or card number.
"""

import math
from dataclasses import dataclass

from controlplane.params.schema import INTENT_LABELS, TIERS
from engine_node.policy.masking import mask
from engine_node.review_sampling import BATCH, MAX_TEXT_CHARS, REASONS

MAX_BATCH = BATCH
# A message of many masked pieces grows by its placeholders; this bounds what is stored whatever a node sends.
MAX_STORED_CHARS = 2 * MAX_TEXT_CHARS
FIELDS = frozenset({"text", "intent", "confidence", "runner_up", "runner_up_confidence", "reasons", "tier"})


class SampleInvalid(ValueError):
    """One field of one sample is wrong."""

    def __init__(self, index: int, field: str, message: str):
        super().__init__(f"samples[{index}].{field}: {message}")


class BatchInvalid(ValueError):
    """The message itself is wrong (not a list, too many samples): nothing of it is stored."""


@dataclass(frozen=True)
class Sample:
    """A checked, masked sample, ready to store."""

    text: str
    intent: str
    confidence: float | None
    runner_up: str
    runner_up_confidence: float | None
    reasons: tuple[str, ...]
    tier: str


def checked_batch(samples: object) -> tuple[list[Sample], list[str]]:
    """The valid samples of a batch and one error per refused sample; BatchInvalid when the batch is not a batch."""
    if not isinstance(samples, list):
        raise BatchInvalid("samples: must be a list")
    if len(samples) > MAX_BATCH:
        raise BatchInvalid(f"samples: at most {MAX_BATCH} per message, got {len(samples)}")
    good, errors = [], []
    for index, raw in enumerate(samples):
        try:
            good.append(checked_sample(index, raw))
        except SampleInvalid as exc:
            errors.append(str(exc))
    return good, errors


def checked_sample(index: int, raw: object) -> Sample:
    if not isinstance(raw, dict):
        raise SampleInvalid(index, "", "must be an object")
    unknown = sorted(set(raw) - FIELDS, key=str)
    if unknown:
        raise SampleInvalid(index, str(unknown[0])[:40], "unknown field")
    text = raw.get("text")
    if not isinstance(text, str) or not text.strip():
        raise SampleInvalid(index, "text", "must be a non-empty string")
    if len(text) > MAX_TEXT_CHARS:
        raise SampleInvalid(index, "text", f"at most {MAX_TEXT_CHARS} characters, got {len(text)}")
    if any(ord(char) < 32 and char not in "\t\n\r" for char in text) or any(
        0xD800 <= ord(char) <= 0xDFFF for char in text
    ):
        raise SampleInvalid(index, "text", "must not contain control characters or lone surrogates")
    reasons = raw.get("reasons")
    if (
        not isinstance(reasons, list)
        or not reasons
        or len(reasons) > len(REASONS)
        or not all(isinstance(reason, str) and reason in REASONS for reason in reasons)
        or len(set(reasons)) != len(reasons)
    ):
        raise SampleInvalid(index, "reasons", f"must be a non-empty list of distinct values of {list(REASONS)}")
    tier = raw.get("tier")
    if tier is not None and tier not in TIERS:
        raise SampleInvalid(index, "tier", f"must be one of {list(TIERS)} or null")
    return Sample(
        text=mask(text, limit=MAX_STORED_CHARS),
        intent=_label(index, raw, "intent"),
        confidence=_probability(index, raw, "confidence"),
        runner_up=_label(index, raw, "runner_up"),
        runner_up_confidence=_probability(index, raw, "runner_up_confidence"),
        reasons=tuple(reasons),
        tier=tier or "",
    )


def _label(index: int, raw: dict, field: str) -> str:
    value = raw.get(field)
    if value is None:
        return ""
    if not isinstance(value, str) or value not in INTENT_LABELS:
        raise SampleInvalid(index, field, "must be one of the intent labels or null")
    return value


def _probability(index: int, raw: dict, field: str) -> float | None:
    value = raw.get(field)
    if value is None:
        return None
    # The range first: a huge integer (valid JSON) overflows math.isfinite; NaN fails every comparison.
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1 or not math.isfinite(value):
        raise SampleInvalid(index, field, "must be a number from 0 to 1 or null")
    return round(float(value), 4)
