"""Short replies whole, long ones streamed: the head of a stream up to the threshold, and joining a whole one."""

import asyncio
import json

import pytest

from engine_node.completion import UpstreamError
from engine_node.long_replies import joined, read_head, takes_either


def chunk(content="", finish=None, **extra):
    delta = {"content": content} if content else {}
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 7,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        **extra,
    }


USAGE = {"id": "chatcmpl-1", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}}


async def agen(items):
    for item in items:
        yield item


def head_of(items, threshold):
    async def run():
        rest = agen(items)
        head, more = await read_head(rest, threshold)
        return head, more, [c async for c in rest]

    return asyncio.run(run())


def test_a_reply_within_the_threshold_is_read_whole_and_joined_as_one_answer():
    items = [chunk(role="assistant"), chunk("a"), chunk("b"), chunk("", "length"), chunk("c"), chunk("", "stop")]
    items[4]["x_continuation_round"] = 1
    items[5]["x_continuation_rounds"] = 1
    head, more, rest = head_of([*items, USAGE], 3)
    assert (more, rest) == (False, [])
    answer = joined(head)
    assert answer["object"] == "chat.completion" and answer["choices"][0]["message"]["content"] == "abc"
    assert answer["choices"][0]["finish_reason"] == "stop" and answer["x_continuation_rounds"] == 1
    assert answer["usage"]["completion_tokens"] == 4 and answer["id"] == "chatcmpl-1"


def test_a_reply_past_the_threshold_stops_at_the_first_chunk_beyond_it_and_leaves_the_rest():
    items = [chunk("x") for _ in range(5)] + [chunk("", "stop")]
    head, more, rest = head_of(items, 3)
    assert more and len(head) == 4 and len(rest) == 2  # three within, the fourth is past: it goes out first


def test_chunks_without_content_do_not_count_toward_the_threshold():
    head, more, _ = head_of([chunk(role="assistant"), chunk(""), chunk("x"), chunk("", "stop")], 1)
    assert not more and len(head) == 4


def test_an_engine_error_mid_reply_is_an_upstream_error_for_a_client_that_asked_for_the_answer_whole():
    with pytest.raises(UpstreamError) as caught:
        joined([chunk("a"), {"error": {"message": "engine died", "code": 500}}])
    assert caught.value.status == 502 and b"engine died" in caught.value.body
    with pytest.raises(UpstreamError):
        joined([USAGE])  # no reply at all


@pytest.mark.parametrize(
    ("accept", "body", "either"),
    [
        ("text/event-stream, application/json", {}, True),
        ("application/json;q=0.9, text/event-stream", {"n": 1}, True),
        ("application/json", {}, False),
        (None, {}, False),
        ("text/event-stream", {"logprobs": True}, False),  # token logprobs are not carried by a joined answer
        ("text/event-stream", {"tools": [{"type": "function"}]}, False),
        ("text/event-stream", {"n": 2}, False),
    ],
)
def test_only_a_client_that_takes_either_and_needs_nothing_the_join_drops_gets_the_threshold(accept, body, either):
    headers = {} if accept is None else {"Accept": accept}
    assert takes_either(headers, body) is either


def test_a_joined_answer_serialises_as_a_plain_chat_completion():
    answer = joined([chunk("hé"), chunk("", "stop")])
    answer.pop("x_continuation_rounds")
    assert json.loads(json.dumps(answer))["choices"][0]["message"] == {"role": "assistant", "content": "hé"}
