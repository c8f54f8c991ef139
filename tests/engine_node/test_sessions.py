"""Stream sessions: the hash chain, both stores, and resuming a stream within and after the grace period."""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
import uuid
from pathlib import Path

import pytest

from engine_node.sessions import (
    DETACHED,
    DONE,
    FINISHED,
    INTERRUPTED,
    STREAMING,
    MemorySessionStore,
    RedisSessionStore,
    SeqOutOfRange,
    SessionClosed,
    SessionRecord,
    SessionUnknown,
    StreamSession,
    StreamSessions,
    check_chain,
    genesis_hash,
    interrupted_event,
    new_session_id,
    pump_chunks,
    pump_sse,
    render_sse,
    request_summary,
    resume_position,
    verify_chain,
)

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/14")
GRACE_S = 0.5  # the margins below stay >= 0.2 s on a loaded machine


def chunk(i: int, text: str, finish_reason: str | None = None) -> dict:
    """A chat chunk shaped like vLLM's."""
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "chat",
        "choices": [{"index": 0, "delta": {"content": text}, "logprobs": None, "finish_reason": finish_reason}],
    }


WORDS = [f"w{i}-说 " for i in range(30)]


def parse_sse(data: bytes) -> dict:
    """One SSE event as {"event", "id", "data"} (data parsed unless it is [DONE])."""
    event = {"event": None, "id": None, "data": None}
    for line in data.decode().strip("\n").split("\n"):
        name, _, value = line.partition(": ")
        event[name] = value
    if event["data"] != "[DONE]":
        event["data"] = json.loads(event["data"])
    return event


def text_of(events: list[dict]) -> str:
    return "".join(
        e["data"]["choices"][0]["delta"]["content"]
        for e in events
        if isinstance(e["data"], dict) and e["data"].get("choices")
    )


class Producer:
    """Publishes len(words) chunks with a pause before each; remembers whether it was cancelled."""

    def __init__(self, relay, words=WORDS, pause_s: float = 0.01, fail_after: int | None = None):
        self.relay, self.words, self.pause_s, self.fail_after = relay, words, pause_s, fail_after
        self.published = 0
        self.cancelled = False

    async def __call__(self):
        try:
            for i, word in enumerate(self.words):
                await asyncio.sleep(self.pause_s)
                if self.fail_after is not None and i == self.fail_after:
                    raise ConnectionResetError("engine went away")
                last = i == len(self.words) - 1
                await self.relay.publish(chunk(i, word, "stop" if last else None))
                self.published += 1
            await self.relay.finish()
        except asyncio.CancelledError:
            self.cancelled = True
            raise


async def read(stream, limit: int | None = None) -> list[dict]:
    events = []
    async for data in stream:
        events.append(parse_sse(data))
        if limit is not None and len(events) == limit:
            break
    return events


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


# --- stores -----------------------------------------------------------------------------------------------------


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
def store_factory(request):
    """store_factory() -> a fresh store (called inside the test's event loop); Redis keys are deleted after."""
    node = f"test-{uuid.uuid4().hex[:8]}"
    made = []

    def make():
        store = MemorySessionStore() if request.param == "memory" else RedisSessionStore(REDIS_URL, node=node)
        made.append(store)
        return store

    yield make
    if request.param == "redis":
        import redis

        client = redis.Redis.from_url(REDIS_URL)
        keys = list(client.scan_iter(f"engine_node:session:{node}:*"))
        if keys:
            client.delete(*keys)
        client.close()


def test_store_keeps_record_and_entries_and_expires_them(store_factory):
    async def scenario():
        store = store_factory()
        record = SessionRecord("sess-0001", 42, {"model": "chat"}, STREAMING, 0, "h0", 1.0, 1.0)
        await store.create(record, ttl_s=60)
        await store.append("sess-0001", [b"one", "二".encode()], {"last_seq": 2, "last_hash": "h2"}, ttl_s=60)
        await store.append("sess-0001", [b"three"], {"state": FINISHED, "updated_at": 2.5}, ttl_s=0.2)
        loaded = await store.load("sess-0001")
        assert (loaded.seed, loaded.meta, loaded.state, loaded.last_seq, loaded.last_hash) == (
            42, {"model": "chat"}, FINISHED, 2, "h2",
        )  # fmt: skip
        assert loaded.updated_at == 2.5
        assert await store.entries("sess-0001") == [b"one", "二".encode(), b"three"]
        assert await store.entries("sess-0001", 2) == [b"three"]
        assert await store.load("sess-0002") is None
        if isinstance(store, RedisSessionStore):
            meta_key, chunks_key = store.keys("sess-0001")
            assert meta_key.startswith("engine_node:session:test-") and chunks_key == meta_key + ":chunks"
            assert 0 < await store.redis.pttl(chunks_key) <= 200
        await asyncio.sleep(0.3)
        assert await store.load("sess-0001") is None
        assert await store.entries("sess-0001") == []
        await store.close()

    asyncio.run(scenario())


def test_memory_store_drops_oldest_finished_sessions_over_its_byte_cap():
    async def scenario():
        store = MemorySessionStore(max_bytes=250)
        for name in ("sess-old1", "sess-live", "sess-new1"):
            await store.create(SessionRecord(name, 1), ttl_s=60)
        await store.append("sess-old1", [b"x" * 100], {"state": FINISHED}, ttl_s=60)
        await store.append("sess-live", [b"x" * 100], {}, ttl_s=60)
        await store.append("sess-new1", [b"x" * 100], {"state": FINISHED}, ttl_s=60)
        assert await store.load("sess-old1") is None  # evicted first
        assert await store.load("sess-live") is not None  # a live session is never evicted
        assert await store.load("sess-new1") is not None
        assert store.size_bytes == 200

    asyncio.run(scenario())


# --- resuming ---------------------------------------------------------------------------------------------------


def test_resume_within_grace_gets_the_rest_with_no_gap_or_duplicate(store_factory):
    async def scenario():
        sessions = StreamSessions(store_factory(), grace_s=GRACE_S)
        relay = await sessions.start(new_session_id(), 1234, {"model": "chat"})
        producer = Producer(relay)
        relay.run(producer())

        async with relay.subscribe(0) as stream:
            first = await read(stream, limit=5)
        await asyncio.sleep(0.1)  # the client is away; generation goes on
        assert relay.state == DETACHED and producer.published > 5
        record = await sessions.info(relay.session_id)
        assert record.state == DETACHED and record.seed == 1234

        stream = await sessions.resume(relay.session_id, after_seq=5)
        async with stream:
            rest = await read(stream)
        assert rest[-1]["data"] == "[DONE]"
        events = first + rest[:-1]
        assert [int(e["id"]) for e in events] == list(range(1, len(WORDS) + 2))
        assert text_of(events) == "".join(WORDS)
        assert events[-1]["data"]["x_final"] is True and events[-1]["data"]["choices"] == []
        assert verify_chain(relay.session_id, 1234, [e["data"] for e in events])
        assert not producer.cancelled and relay.state == FINISHED
        await sessions.close()

    asyncio.run(scenario())


def test_no_reconnect_within_grace_cancels_generation_and_a_later_resume_gets_interrupted(store_factory):
    async def scenario():
        sessions = StreamSessions(store_factory(), grace_s=GRACE_S)
        relay = await sessions.start(new_session_id(), 99, {})
        producer = Producer(relay, words=WORDS * 10, pause_s=0.02)  # ~6 s if never stopped
        task = relay.run(producer())

        async with relay.subscribe(0) as stream:
            await read(stream, limit=3)
        detached_at = time.monotonic()
        await asyncio.sleep(GRACE_S + 0.2)
        assert producer.cancelled and task.cancelled()
        assert relay.state == INTERRUPTED and relay.reason == "client_gone"
        published = producer.published
        assert published < 3 + (time.monotonic() - detached_at) / 0.02 + 2
        await asyncio.sleep(0.1)
        assert producer.published == published  # no more compute spent

        stream = await sessions.resume(relay.session_id, after_seq=3)
        events = await read(stream)
        assert [e["event"] for e in events] == ["interrupted", None]
        error = events[0]["data"]
        assert error["error"]["type"] == "generation_interrupted" and error["error"]["code"] == "client_gone"
        assert error["x_session"] == relay.session_id and error["x_seq"] == published and error["x_seed"] == 99
        assert events[1]["data"] == "[DONE]"
        assert sessions.live == 0
        record = await sessions.store.load(relay.session_id)
        assert (record.state, record.reason, record.last_seq) == (INTERRUPTED, "client_gone", published)
        with pytest.raises(SessionClosed):
            await relay.publish(chunk(0, "late"))
        await sessions.close()

    asyncio.run(scenario())


def test_finished_session_replays_byte_identical_from_the_store(store_factory):
    async def scenario():
        sessions = StreamSessions(store_factory(), grace_s=GRACE_S, flush_interval_s=3)
        started = time.monotonic()
        relay = await sessions.start(new_session_id(), 5, {})
        relay.run(Producer(relay, pause_s=0)())
        async with relay.subscribe(0) as stream:
            sent = [data async for data in stream]
        await relay.stored.wait()
        assert time.monotonic() - started < 1.5  # the end of a session is written at once, not at the next flush
        assert sessions.live == 0  # from now on the store answers

        stream = await sessions.resume(relay.session_id, after_seq=3)
        assert [data async for data in stream] == sent[3:]
        total = len(WORDS) + 1
        assert [data async for data in await sessions.resume(relay.session_id, after_seq=total)] == [DONE]
        with pytest.raises(SeqOutOfRange):
            await sessions.resume(relay.session_id, after_seq=total + 1)
        with pytest.raises(SeqOutOfRange):
            await sessions.resume(relay.session_id, after_seq=-1)
        await sessions.close()

    asyncio.run(scenario())


def test_unknown_sessions_and_sessions_lost_by_a_restarted_gateway(store_factory):
    async def scenario():
        store = store_factory()
        sessions = StreamSessions(store, grace_s=GRACE_S, flush_interval_s=0.1)
        for unknown in (new_session_id(), "../etc", ""):
            with pytest.raises(SessionUnknown):
                await sessions.resume(unknown, 0)
        relay = await sessions.start(new_session_id(), 8, {})
        await relay.publish(chunk(0, "a"))
        await asyncio.sleep(0.02)
        assert await store.entries(relay.session_id) == []  # store writes are batched per flush interval
        await relay.publish(chunk(1, "b"))
        await asyncio.sleep(0.15)
        assert len(await store.entries(relay.session_id)) == 2
        # A new gateway process on the same store: the record says streaming, but nothing here generates it.
        restarted = StreamSessions(store, grace_s=GRACE_S)
        events = await read(await restarted.resume(relay.session_id, 0))
        assert events[0]["event"] == "interrupted" and events[0]["data"]["error"]["code"] == "session_lost"
        assert events[0]["data"]["x_seq"] == 2
        assert (await store.load(relay.session_id)).state == INTERRUPTED
        relay.interrupt("test_over")
        late = await read(await sessions.resume(relay.session_id, 0))  # still held here: no text, just the event
        assert [e["event"] for e in late] == ["interrupted", None] and late[0]["data"]["error"]["code"] == "test_over"
        await sessions.close()

    asyncio.run(scenario())


def test_engine_failure_mid_stream_tells_the_connected_client():
    async def scenario():
        sessions = StreamSessions(grace_s=GRACE_S)
        relay = await sessions.start(None, None, {})
        relay.run(Producer(relay, fail_after=4)())
        async with relay.subscribe(0) as stream:
            events = await read(stream)
        assert [e["event"] for e in events] == [None] * 4 + ["interrupted", None]
        assert events[4]["data"]["error"]["code"] == "upstream_error" and events[4]["data"]["x_seq"] == 4
        assert text_of(events) == "".join(WORDS[:4])

    asyncio.run(scenario())


def test_a_second_connection_takes_over_and_the_first_leaving_does_not_detach():
    async def scenario():
        sessions = StreamSessions(grace_s=GRACE_S)
        relay = await sessions.start(None, 3, {})
        relay.run(Producer(relay)())
        old = relay.subscribe(0)
        seen = await read(old, limit=4)
        async with await sessions.resume(relay.session_id, 4) as new:
            old.close()  # the server noticed the dead connection only now
            assert relay.state == STREAMING
            rest = await read(new)
        assert text_of(seen + rest) == "".join(WORDS) and relay.state == FINISHED

    asyncio.run(scenario())


def test_pumps_publish_upstream_streams():
    async def lines(payloads, done=True):
        for p in payloads:
            yield f"data: {json.dumps(p)}\n".encode()
            yield b"\n"
        if done:
            yield b"data: [DONE]\n"

    async def scenario():
        sessions = StreamSessions(grace_s=GRACE_S)
        ok = await sessions.start(None, 1, {})
        ok.run(pump_sse(ok, lines([chunk(0, "a"), chunk(1, "b")])))
        cut = await sessions.start(None, 1, {})
        cut.run(pump_sse(cut, lines([chunk(0, "a")], done=False)))
        dicts = await sessions.start(None, 1, {})

        async def upstream():
            yield chunk(0, "x")
            yield chunk(1, "y")

        dicts.run(pump_chunks(dicts, upstream()))
        results = {}
        for name, relay in (("ok", ok), ("cut", cut), ("dicts", dicts)):
            async with relay.subscribe(0) as stream:
                results[name] = await read(stream)
        assert text_of(results["ok"]) == "ab" and results["ok"][-2]["data"]["x_final"] is True
        assert results["cut"][-2]["event"] == "interrupted"
        assert results["cut"][-2]["data"]["error"]["code"] == "upstream_closed"
        assert text_of(results["dicts"]) == "xy" and dicts.state == FINISHED

    asyncio.run(scenario())


def test_the_default_grace_period_is_five_seconds():
    async def scenario():
        sessions = StreamSessions()
        relay = await sessions.start(None, 1, {})
        producer = Producer(relay, words=WORDS * 40, pause_s=0.02)
        relay.run(producer())
        async with relay.subscribe(0) as stream:
            await read(stream, limit=2)
        await asyncio.sleep(4.5)
        assert relay.state == DETACHED and not producer.cancelled
        await asyncio.sleep(0.8)
        assert relay.state == INTERRUPTED and producer.cancelled

    asyncio.run(scenario())


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
    for chunk in chunks:  # the documented lines are exactly what the renderer sends
        assert f"data: {json.dumps(chunk, ensure_ascii=False, separators=(',', ':'))}" in example
        assert render_sse(chunk).decode() in example
    interrupted = [block for block in doc_blocks("text") if block.startswith("event: interrupted\ndata: {")][-1]
    assert interrupted.startswith(interrupted_event("V1StGXR8_Z5jdHi6B-myTw", 2, 1234, "client_gone").decode())
