"""The replay generator's reading of a gateway's answer: decision headers (hostile or missing ones too) and usage."""

from engine_node.replay_load import Outcome, read_decision, read_usage


def test_decision_headers_are_read_into_the_row():
    outcome = Outcome(seq=0, due_s=0)
    read_decision(
        outcome,
        {
            "X-Policy-Tier": "strict",
            "X-Policy-Rule": "regex",
            "X-Policy-Max-Tokens": "256",
            "X-Policy-Intent": "order_status;confidence=0.953",
            "X-Engine-Node": "gpu-1",
            "X-Continuation-Rounds": "2",
        },
    )
    assert (outcome.tier, outcome.tier_rule, outcome.max_tokens, outcome.node) == ("strict", "regex", 256, "gpu-1")
    assert (outcome.intent, outcome.intent_confidence, outcome.continuation_rounds) == ("order_status", 0.953, 2)


def test_missing_or_hostile_headers_leave_fields_empty_and_bounded():
    outcome = Outcome(seq=0, due_s=0)
    read_decision(
        outcome,
        {"X-Policy-Max-Tokens": "None", "X-Policy-Intent": "x" * 500 + ";confidence=high", "X-Policy-Tier": "t" * 99},
    )
    assert outcome.max_tokens is None and outcome.intent_confidence is None
    assert len(outcome.intent) == 64 and len(outcome.tier) == 16 and outcome.continuation_rounds is None
    read_decision(outcome, {"X-Policy-Intent": "other;confidence=nan", "X-Continuation-Rounds": "99999999"})
    assert outcome.intent_confidence is None and outcome.continuation_rounds is None
    read_usage(outcome, {"prompt_tokens": "12", "completion_tokens": 7})
    assert (outcome.prompt_tokens, outcome.reply_tokens) == (None, 7)
    read_usage(outcome, {"prompt_tokens": -5, "completion_tokens": 2**40})
    assert (outcome.prompt_tokens, outcome.reply_tokens) == (None, None)
