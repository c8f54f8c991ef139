"""Stream sessions' hash chain and framing, read by the official client and by the verifier the protocol document
gives."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest

from engine_node.sessions import (
    SeqOutOfRange,
    StreamSession,
    StreamSessions,
    check_chain,
    genesis_hash,
    interrupted_event,
    render_sse,
    request_summary,
    resume_position,
    verify_chain,
)
from tests.engine_node.session_streams import GRACE_S, WORDS, Producer, chunk, parse_sse

# --- the chain --------------------------------------------------------------------------------------------------


def framed_chunks(session_id="sess-0001", seed=42, n=5) -> list[dict]:
    session = StreamSession(session_id, seed)
    return [session.frame(chunk(i, WORDS[i])) for i in range(n)]


def test_chain_verifies_and_every_kind_of_tampering_breaks_it():
    chunks = framed_chunks()
    assert [c["x_seq"] for c in chunks] == [1, 2, 3, 4, 5]
    assert verify_chain("sess-0001", 42, chunks)

    edited = [dict(c) for c in chunks]
    edited[2] = {**edited[2], "choices": [{"index": 0, "delta": {"content": "forged"}}]}
    assert not verify_chain("sess-0001", 42, edited)
    assert not verify_chain("sess-0001", 42, [chunks[0], chunks[2], chunks[1], *chunks[3:]])  # reordered
    assert not verify_chain("sess-0001", 42, [*chunks[:2], *chunks[3:]])  # a gap
    assert not verify_chain("sess-0001", 42, [*chunks[:3], chunks[2], *chunks[3:]])  # a duplicate
    assert not verify_chain("sess-0001", 43, chunks)  # another seed
    assert not verify_chain("sess-0002", 42, chunks)  # another session
    renumbered = [dict(c) for c in chunks]
    renumbered[1]["x_hash"] = chunks[1]["x_hash"][:-1] + ("0" if chunks[1]["x_hash"][-1] != "0" else "1")
    assert not verify_chain("sess-0001", 42, renumbered)


def test_a_resumed_tail_verifies_from_the_last_hash_received():
    chunks = framed_chunks(n=6)
    last_hash = check_chain("sess-0001", 42, chunks[:4])
    assert last_hash == chunks[3]["x_hash"]
    assert verify_chain("sess-0001", 42, chunks[4:], after_seq=4, prev_hash=last_hash)
    assert not verify_chain("sess-0001", 42, chunks[5:], after_seq=4, prev_hash=last_hash)
    assert not verify_chain("sess-0001", 42, chunks[4:], after_seq=4)  # no hash to continue from


def test_framing_is_json_sse_with_the_seq_as_event_id():
    session = StreamSession("sess-0001", 7)
    upstream = {**chunk(0, 'héllo "quoted" 世界'), "x_seq": 99}  # stale framing keys are replaced
    data = session.frame_sse(upstream)
    event = parse_sse(data)
    assert event["id"] == "1" and event["event"] is None
    assert event["data"]["x_seq"] == 1 and event["data"]["x_session"] == "sess-0001"
    assert event["data"]["choices"][0]["delta"]["content"] == 'héllo "quoted" 世界'
    assert verify_chain("sess-0001", 7, [event["data"]])
    assert render_sse(event["data"]) == data  # the pure renderer emits the same bytes
    assert StreamSession("sess-0001", 7).frame(upstream) == event["data"]
    assert genesis_hash("sess-0001", 7) != genesis_hash("sess-0001", 8)


def test_interrupted_event_and_resume_position():
    event = parse_sse(interrupted_event("sess-0001", 12, 7, "client_gone"))
    assert event["event"] == "interrupted" and event["id"] is None
    assert event["data"]["error"]["message"] == "generation interrupted"
    assert event["data"]["error"]["type"] == "generation_interrupted"
    assert (event["data"]["x_session"], event["data"]["x_seq"], event["data"]["x_seed"]) == ("sess-0001", 12, 7)

    assert resume_position(None, None) == 0
    assert resume_position("5", "9") == 5
    assert resume_position(None, "9") == 9
    for bad in ("-1", "x", "1.5"):
        with pytest.raises(SeqOutOfRange):
            resume_position(bad)

    summary = request_summary({"model": "chat", "messages": [{"role": "user", "content": "hi"}]}, path="/v1/x")
    assert summary["model"] == "chat" and len(summary["input_sha256"]) == 64


# --- the official client ----------------------------------------------------------------------------------------


def test_openai_client_reads_framed_chunks_and_raises_on_interruption():
    openai = pytest.importorskip("openai")
    from aiohttp import web

    async def scenario():
        sessions = StreamSessions(grace_s=GRACE_S)

        async def completions(request: web.Request) -> web.StreamResponse:
            body = await request.json()
            relay = await sessions.start(None, body.get("seed"), request_summary(body))
            relay.run(Producer(relay, pause_s=0.001, fail_after=body.get("fail_after"))())
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream", **relay.headers})
            await response.prepare(request)
            async with relay.subscribe(0) as stream:
                async for data in stream:
                    await response.write(data)
            return response

        app = web.Application()
        app.router.add_post("/v1/chat/completions", completions)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused")
        try:
            messages = [{"role": "user", "content": "hi"}]
            stream = await client.chat.completions.create(model="chat", messages=messages, stream=True, seed=77)
            chunks = [c async for c in stream]
            assert "".join(c.choices[0].delta.content for c in chunks if c.choices) == "".join(WORDS)
            framed = [c.model_dump(exclude_unset=True) for c in chunks]
            assert framed[-1]["x_final"] is True and framed[-1]["x_seq"] == len(WORDS) + 1
            assert verify_chain(framed[0]["x_session"], 77, framed)

            with pytest.raises(openai.APIError) as raised:
                stream = await client.chat.completions.create(
                    model="chat", messages=messages, stream=True, extra_body={"fail_after": 2}
                )
                [c async for c in stream]
            assert raised.value.message == "generation interrupted"
            assert raised.value.body["type"] == "generation_interrupted"
        finally:
            await client.close()
            await runner.cleanup()

    asyncio.run(scenario())


# --- the protocol document --------------------------------------------------------------------------------------

DOC = Path(__file__).resolve().parents[2] / "docs" / "stream-sessions.md"


def doc_blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.DOTALL)


def test_the_documented_verifier_accepts_a_real_stream_and_rejects_a_tampered_one():
    namespace: dict = {}
    exec(doc_blocks("python")[0], namespace)
    verify_stream = namespace["verify_stream"]

    async def scenario():
        sessions = StreamSessions(grace_s=GRACE_S)
        relay = await sessions.start(None, 2024, {})
        relay.run(Producer(relay, pause_s=0)())
        async with relay.subscribe(0) as stream:
            return relay.session_id, [parse_sse(data) async for data in stream]

    session_id, events = asyncio.run(scenario())
    lines = [json.dumps(e["data"], ensure_ascii=False) if e["data"] != "[DONE]" else "[DONE]" for e in events]
    chunks = verify_stream(session_id, 2024, lines)
    assert chunks[-1]["x_final"] is True
    assert verify_stream(session_id, 2024, lines[10:], after_seq=10, prev_hash=chunks[9]["x_hash"])
    with pytest.raises(ValueError, match="chain broken at chunk 4"):
        verify_stream(session_id, 2024, lines[:3] + lines[4:])
    with pytest.raises(ValueError, match="interrupted"):
        event = parse_sse(interrupted_event(session_id, 3, 2024, "client_gone"))
        verify_stream(session_id, 2024, [json.dumps(event["data"])])


def test_the_documented_example_exchange_is_a_valid_chain():
    example = next(block for block in doc_blocks("text") if "connection lost" in block)
    chunks = [json.loads(line[6:]) for line in example.splitlines() if line.startswith("data: {")]
    assert [c["x_seq"] for c in chunks] == [1, 2, 3, 4]
    assert verify_chain("V1StGXR8_Z5jdHi6B-myTw", 1234, chunks)
    for sent in chunks:  # the documented lines are exactly what the renderer sends
        assert f"data: {json.dumps(sent, ensure_ascii=False, separators=(',', ':'))}" in example
        assert render_sse(sent).decode() in example
    interrupted = [block for block in doc_blocks("text") if block.startswith("event: interrupted\ndata: {")][-1]
    assert interrupted.startswith(interrupted_event("V1StGXR8_Z5jdHi6B-myTw", 2, 1234, "client_gone").decode())
