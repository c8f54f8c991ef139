"""Stream sessions: both stores, and resuming a stream within and after the grace period (the chain, the framing and
the official client: test_session_chain.py)."""

from __future__ import annotations

import asyncio
import json
import uuid

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
    StreamSessions,
    new_session_id,
    pump_chunks,
    pump_sse,
    verify_chain,
)
from tests.engine_node.session_streams import GRACE_S, REDIS_URL, WORDS, Producer, chunk, read, text_of

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
        await asyncio.sleep(GRACE_S + 0.2)
        assert producer.cancelled and task.cancelled()
        assert relay.state == INTERRUPTED and relay.reason == "client_gone"
        published = producer.published
        assert published < len(WORDS * 10)  # stopped short of the reply
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
        # No periodic flush can happen within the test: the end of a session is written at once, not at a flush.
        sessions = StreamSessions(store_factory(), grace_s=GRACE_S, flush_interval_s=3600)
        relay = await sessions.start(new_session_id(), 5, {})
        relay.run(Producer(relay, pause_s=0)())
        async with relay.subscribe(0) as stream:
            sent = [data async for data in stream]
        await asyncio.wait_for(relay.stored.wait(), 60)
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
