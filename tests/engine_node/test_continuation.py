"""Continuation of replies cut by the first-turn cap, against a scripted engine that answers round by round.

The scripted engine stands in for vLLM so each round's text and finish_reason are exact: the simulator always cuts
mid-sentence, and vLLM's tiny test model writes random tokens. The simulator path is covered end to end in
test_gateway_policy.py.
"""

import asyncio
import json

import aiohttp
from aiohttp import web

from engine_node import completion
from engine_node.policy.rules import Policy

PARAMS = {"max_tokens": {"default": 8, "continuation_max_rounds": 2, "whitelist": []}}


class ScriptedEngine:
    """Answers the n-th chat request with rounds[n] = (text, finish_reason); records each request body."""

    def __init__(self, rounds):
        self.rounds = rounds
        self.requests: list[dict] = []

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        text, finish = self.rounds[len(self.requests) - 1]
        usage = {"prompt_tokens": 10, "completion_tokens": len(text.split()), "total_tokens": 0}
        if not body.get("stream"):
            return web.json_response(
                {"id": f"r{len(self.requests)}", "object": "chat.completion", "created": 1, "model": "m",
                 "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                              "finish_reason": finish}], "usage": usage}
            )  # fmt: skip
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        base = {"id": f"r{len(self.requests)}", "object": "chat.completion.chunk", "created": len(self.requests),
                "model": "m"}  # fmt: skip
        chunks = [{**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                        "finish_reason": None}]}]  # fmt: skip
        words = text.split(" ")
        for i, word in enumerate(words):
            piece = word if i == 0 else " " + word
            last = i == len(words) - 1
            chunks.append({**base, "choices": [{"index": 0, "delta": {"content": piece},
                                                "finish_reason": finish if last else None}]})  # fmt: skip
        chunks.append({**base, "choices": [], "usage": usage})
        for chunk in chunks:
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        return response


async def _run(rounds, *, stream: bool, client_max=None, include_usage=True):
    engine = ScriptedEngine(rounds)
    app = web.Application()
    app.router.add_post("/v1/chat/completions", engine.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}/v1/chat/completions"
    decision = Policy(PARAMS).decide("hello", client_max_tokens=client_max)
    body = {"model": "m", "messages": [{"role": "user", "content": "hello"}], "max_tokens": decision.max_tokens}
    try:
        async with aiohttp.ClientSession() as http:
            if stream:
                result = [c async for c in completion.stream(http, url, body, decision, {}, include_usage)]
            else:
                result = await completion.complete(http, url, body, decision, {})
    finally:
        await runner.cleanup()
    return engine, result


def _text(chunks):
    return "".join((c["choices"][0]["delta"].get("content") or "") for c in chunks if c["choices"])


def test_a_stream_cut_mid_sentence_is_continued_as_one_answer():
    rounds = [("Your parcel left the", "length"), (" warehouse today and", "length"), (" arrives soon.", "stop")]
    engine, chunks = asyncio.run(_run(rounds, stream=True))
    assert len(engine.requests) == 3
    assert _text(chunks) == "Your parcel left the warehouse today and arrives soon."
    # One answer: one id, one role chunk, exactly one finish_reason, at the end, usage summed.
    assert {c["id"] for c in chunks} == {"r1"}
    assert sum("role" in c["choices"][0]["delta"] for c in chunks if c["choices"]) == 1
    finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert finishes == ["stop"]
    assert chunks[-1]["usage"]["completion_tokens"] == 4 + 3 + 2
    # The engine continued its own partial reply.
    follow = engine.requests[1]
    assert follow["continue_final_message"] is True and follow["add_generation_prompt"] is False
    assert follow["messages"][-1] == {"role": "assistant", "content": "Your parcel left the"}
    assert engine.requests[2]["messages"][-1]["content"] == "Your parcel left the warehouse today and"
    assert len(engine.requests[2]["messages"]) == 2


def test_a_reply_cut_at_a_sentence_end_is_not_continued():
    engine, chunks = asyncio.run(_run([("您的包裹已发出。", "length"), ("unused", "stop")], stream=True))
    assert len(engine.requests) == 1
    assert _text(chunks) == "您的包裹已发出。"
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "length"


def test_continuation_is_bounded_by_the_template_rounds():
    rounds = [("one two", "length")] * 5
    engine, answer = asyncio.run(_run(rounds, stream=False))
    assert len(engine.requests) == 3  # the first round and 2 continuations
    assert answer["choices"][0]["message"]["content"] == "one twoone twoone two"
    assert answer["choices"][0]["finish_reason"] == "length"
    assert answer["x_continuation_rounds"] == 2
    assert answer["usage"]["completion_tokens"] == 6


def test_a_client_that_asked_for_a_short_reply_is_not_continued():
    engine, answer = asyncio.run(_run([("a short", "length"), ("x", "stop")], stream=False, client_max=4))
    assert len(engine.requests) == 1
    assert answer["choices"][0]["finish_reason"] == "length"


def test_usage_is_left_out_unless_the_client_asked():
    _, chunks = asyncio.run(_run([("done.", "stop")], stream=True, include_usage=False))
    assert all(c["choices"] for c in chunks)


def test_the_first_chunk_of_each_continuation_round_is_marked_with_its_number():
    rounds = [("Your parcel left the", "length"), (" warehouse today and", "length"), (" arrives soon.", "stop")]
    _, chunks = asyncio.run(_run(rounds, stream=True))
    marked = [(i, c["x_continuation_round"]) for i, c in enumerate(chunks) if "x_continuation_round" in c]
    assert [number for _, number in marked] == [1, 2]
    # Everything before the first mark is the first round's text, exactly; between the marks, the second round's.
    assert _text(chunks[: marked[0][0]]) == "Your parcel left the"
    assert _text(chunks[marked[0][0] : marked[1][0]]) == " warehouse today and"


def test_an_answer_that_was_not_continued_carries_no_round_mark():
    _, chunks = asyncio.run(_run([("Your parcel left today.", "length")], stream=True))
    assert not any("x_continuation_round" in c for c in chunks)
    assert chunks[-2]["x_continuation_rounds"] == 0
