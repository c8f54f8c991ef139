"""Suggestions drawn from an analysis, each with its evidence and the template fields it would change.

- first-turn cap: the N-th percentile (90 by default) of first-turn reply lengths, rounded up to a multiple of 32
  (of 128 above 512 tokens), at most the hard ceiling and at least the streaming threshold and the degradation cap
  (the template's rules), with the share of first-turn replies it covers;
- whitelist: intents (at least `MIN_INTENT_REPLIES` replies) whose P95 reply is longer than that cap and that no
  whitelist of the template names yet, each with its P95 and count;
- long-context threshold: the P99 of prompt lengths rounded up to a power of two (at least 512), so the long-context
  queue carries about the longest 1 % of prompts;
- strict patterns: how many user messages each pattern matched (evidence only; patterns change in the editor).
"""

from __future__ import annotations

import math

from controlplane.convlogs.analysis import NO_INTENT, LogAnalyser

MIN_INTENT_REPLIES = 20
MIN_LONG_CONTEXT = 512
KINDS = ("first_turn_cap", "whitelist", "long_context_threshold", "strict_patterns")
APPLICABLE_KINDS = ("first_turn_cap", "whitelist", "long_context_threshold")


def sensible_cap(tokens: int) -> int:
    """Rounded up to a multiple of 32 tokens, of 128 above 512."""
    step = 32 if tokens <= 512 else 128
    return max(step, math.ceil(tokens / step) * step)


def sensible_threshold(tokens: int) -> int:
    """The next power of two, at least MIN_LONG_CONTEXT."""
    return max(MIN_LONG_CONTEXT, 1 << max(0, tokens - 1).bit_length())


def suggest(analyser: LogAnalyser, *, coverage: int = 90) -> list[dict]:
    params = analyser.policy.params
    histograms = analyser.histograms()
    found = []
    first_turn = histograms["first_turn"]
    cap = analyser.cap
    if first_turn.count:
        percentile = first_turn.percentile(coverage)
        cap = min(sensible_cap(percentile), params["max_tokens"]["hard_ceiling"])
        # The template refuses a cap below these (validation's cross-field rules): the cap is raised to meet them.
        floors = {
            "max_tokens.streaming_threshold": params["max_tokens"]["streaming_threshold"],
            "degradation.max_tokens": params["degradation"]["max_tokens"],
        }
        raised_by = max(floors, key=floors.get) if max(floors.values()) > cap else None
        if raised_by is not None:
            cap = floors[raised_by]
        found.append(
            {
                "kind": "first_turn_cap",
                "title": f"First-turn cap {cap} tokens",
                "applicable": cap != analyser.cap,
                "changes": [{"path": "max_tokens.default", "from": analyser.cap, "to": cap}],
                "evidence": {
                    "coverage_target": coverage,
                    "percentile_tokens": percentile,
                    "first_turn_replies": first_turn.count,
                    "covered": first_turn.at_most(cap) / first_turn.count,
                    "covered_by_current": first_turn.at_most(analyser.cap) / first_turn.count,
                    "current": analyser.cap,
                    "raised_to": raised_by,
                },
            }
        )
    found.append(_whitelist(analyser, histograms, cap))
    prompts = histograms["prompts"]
    if prompts.count:
        threshold = sensible_threshold(prompts.percentile(99))
        current = analyser.long_threshold
        found.append(
            {
                "kind": "long_context_threshold",
                "title": f"Long-context threshold {threshold} tokens",
                "applicable": threshold != current,
                "changes": [{"path": "batch.long_context_threshold", "from": current, "to": threshold}],
                "evidence": {
                    "prompts": prompts.count,
                    "p99_tokens": prompts.percentile(99),
                    "share_above": prompts.share_above(threshold),
                    "share_above_current": prompts.share_above(current),
                    "current": current,
                },
            }
        )
    found.append(_strict(analyser))
    return found


def _whitelist(analyser: LogAnalyser, histograms: dict, cap: int) -> dict:
    intents = []
    for label in sorted(analyser.intents):
        replies = histograms[f"intent:{label}"]
        if label == NO_INTENT or label in analyser.policy.whitelisted or replies.count < MIN_INTENT_REPLIES:
            continue
        p95 = replies.percentile(95)
        if p95 > cap:
            intents.append(
                {"intent": label, "p95": p95, "replies": replies.count, "share_above_cap": replies.share_above(cap)}
            )
    names = [item["intent"] for item in intents]
    return {
        "kind": "whitelist",
        "title": f"Whitelist {', '.join(names)}" if names else "No intent needs the whitelist",
        "applicable": bool(names),
        "changes": [{"path": "max_tokens.whitelist", "add_scenarios": names}] if names else [],
        "evidence": {"cap": cap, "intents": intents, "min_replies": MIN_INTENT_REPLIES},
    }


def _strict(analyser: LogAnalyser) -> dict:
    patterns = [
        {**item, "share": item["hits"] / analyser.user_messages if analyser.user_messages else None}
        for item in analyser.result_patterns()
    ]
    never = [item["pattern"] for item in patterns if not item["hits"]]
    return {
        "kind": "strict_patterns",
        "title": "Strict-tier pattern hits",
        "applicable": False,
        "changes": [],
        "evidence": {
            "user_messages": analyser.user_messages,
            "with_hit": analyser.user_messages_with_hit,
            "patterns": patterns,
            "never_matched": never,
        },
    }
