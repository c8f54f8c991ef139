"""The replay generator's reading of a gateway's answer: decision headers (hostile or missing ones too), usage, and
the first round's end in a continued stream."""

import asyncio
import json
import time

import aiohttp
from aiohttp import web

from engine_node.replay_load import Outcome, Shot, chat_once, read_decision, read_usage
from tests.aiohttp_apps import start_app


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


ROUND_GAP_S = 0.3


def _sse(chunks: list[dict]) -> list[bytes]:
    return [f"data: {json.dumps(chunk)}\n\n".encode() for chunk in chunks]


async def _gateway_like(marked: bool):
    """An SSE answer shaped like the gateway's: round 1, a pause (the continuation's request), round 2 marked."""

    def chunk(content, **extra):
        return {"id": "r1", "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": None}], **extra}

    async def handle(request):
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for line in _sse([chunk("Your parcel"), chunk(" left the")]):
            await response.write(line)
        await asyncio.sleep(ROUND_GAP_S)
        second = chunk(" warehouse.", x_continuation_round=1) if marked else chunk(" warehouse.")
        for line in _sse([second, {"id": "r1", "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 6}}]):
            await response.write(line)
        await response.write(b"data: [DONE]\n\n")
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handle)
    runner, url = await start_app(app)
    outcome = Outcome(seq=0, due_s=0)
    try:
        async with aiohttp.ClientSession() as session:
            shot = Shot(seq=0, due_s=0, url=url, body={"messages": [], "stream": True})
            await chat_once(session, shot, outcome, time.monotonic())
    finally:
        await runner.cleanup()
    return outcome


def test_a_continued_stream_ends_its_first_round_with_the_last_chunk_before_the_mark():
    outcome = asyncio.run(_gateway_like(marked=True))
    assert outcome.ok and outcome.reply_tokens == 6
    assert outcome.ttft_s <= outcome.first_round_s
    # The marked chunk left the server ROUND_GAP_S after round 1's last one, so it cannot have arrived sooner.
    assert outcome.first_round_s + ROUND_GAP_S <= outcome.e2e_s


def test_an_unmarked_stream_ends_its_first_round_at_its_end():
    outcome = asyncio.run(_gateway_like(marked=False))
    assert outcome.ok and outcome.first_round_s == outcome.e2e_s
