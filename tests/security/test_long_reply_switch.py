"""A client's Accept header chooses between a whole answer and a stream past max_tokens.streaming_threshold; it must
not buy more than that: no stream where the policy says the reply cannot pass the threshold (degradation, a small
max_tokens), no partial answer passed off as whole, no request whose fields the join would drop, and no header that
makes the check expensive."""

import pytest

from engine_node.completion import UpstreamError
from engine_node.long_replies import joined, takes_either
from engine_node.policy.rules import Policy

PARAMS = {"max_tokens": {"default": 256, "streaming_threshold": 200, "whitelist": [], "continuation_max_rounds": 2}}
BUNDLE = {"pool": "p", "whitelists": {}, "overrides": [], "intent_model": None}


def test_a_degraded_pool_never_streams_whatever_the_client_accepts():
    degraded = Policy(PARAMS, {**BUNDLE, "degradation": {"active": True, "reason": "load", "since": 0}}, None)
    assert degraded.decide("hello", client_max_tokens=4096).stream_after_tokens is None


def test_a_client_cannot_lift_the_threshold_by_asking_for_fewer_or_more_tokens():
    policy = Policy(PARAMS, {**BUNDLE, "degradation": {"active": False, "reason": "", "since": None}}, None)
    assert policy.decide("hello", client_max_tokens=10**9).stream_after_tokens == 200  # capped at 256, still 200
    assert policy.decide("hello", client_max_tokens=200).stream_after_tokens is None


def test_an_error_after_some_text_is_never_answered_as_a_whole_reply():
    head = [
        {"id": "c", "created": 1, "choices": [{"index": 0, "delta": {"content": "half an ans"}}]},
        {"error": {"message": "CUDA error", "type": "InternalServerError", "code": 500}},
    ]
    with pytest.raises(UpstreamError):
        joined(head)


@pytest.mark.parametrize("field", ["logprobs", "top_logprobs", "tools", "functions", "tool_choice", "function_call"])
def test_requests_whose_answer_the_join_would_drop_stay_on_the_json_path(field):
    assert not takes_either({"Accept": "text/event-stream"}, {field: 1})


def test_hostile_accept_headers_are_cheap_and_case_insensitive():
    assert takes_either({"Accept": "TEXT/Event-Stream"}, {})
    # One substring test over the header, which aiohttp bounds at 8 KB: no parsing, no backtracking.
    huge = ("application/json;q=0.1, " * 400) + "text/event-stream"
    assert takes_either({"Accept": huge}, {})
    assert not takes_either({"Accept": "application/json;q=0.1, " * 400}, {})
