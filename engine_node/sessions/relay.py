"""The producer/consumer split behind resume: a generation keeps running while its client is away, for a while."""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
from collections.abc import AsyncIterable, Coroutine, Mapping

from engine_node.sessions.exceptions import SeqOutOfRange, SessionClosed, SessionUnknown
from engine_node.sessions.framing import (
    DONE,
    StreamSession,
    genesis_hash,
    interrupted_event,
    is_session_id,
    new_seed,
    new_session_id,
)
from engine_node.sessions.stores import (
    DETACHED,
    FINISHED,
    INTERRUPTED,
    STREAMING,
    TERMINAL,
    MemorySessionStore,
    SessionRecord,
    SessionStore,
)
from engine_node.sessions.subscriptions import Replay, Subscription

log = logging.getLogger("engine_node.sessions")

DEFAULT_GRACE_S = 5.0  # the field report: an interruption of over 5 s triggers a rebuild
DEFAULT_TTL_S = 600.0  # a finished or interrupted session stays replayable this long
DEFAULT_ACTIVE_TTL_S = 3600.0  # Redis keys of a generation whose gateway died expire after this
# Live resumes are served from the relay's memory, so the store needs the chunks only by the time the session ends
# (that write is immediate); batching the others makes one Redis round trip per ~12 chunks at 50 chunks/s.
DEFAULT_FLUSH_INTERVAL_S = 0.25
MAX_PENDING = 512  # store writes queued behind a slow store before publish() waits for them


def session_headers(session: SessionRelay | SessionRecord) -> dict[str, str]:
    """The response headers that name a session: its id, and the seed a client sends to start it again."""
    return {"X-Session-Id": session.session_id, "X-Session-Seed": str(session.seed)}


class SessionRelay:
    """One generation: a producer task publishes chunks, any number of clients subscribe, the store keeps them."""

    def __init__(self, owner: StreamSessions, record: SessionRecord):
        self._owner = owner
        self.session_id = record.session_id
        self.seed = record.seed
        self.meta = record.meta
        self.created_at = record.created_at
        self.reason = ""
        self._chain = StreamSession(record.session_id, record.seed)
        self._entries: list[bytes] = []
        self._state = STREAMING
        self._subscribers = 0
        self._changed = asyncio.Event()
        self._producer: asyncio.Task | None = None
        self._grace: asyncio.TimerHandle | None = None
        self._pending: list[bytes] = []
        self._pending_fields: dict = {}
        self._writer: asyncio.Task | None = None
        self._flush_timer: asyncio.TimerHandle | None = None
        self._last_chunk: Mapping = {}
        self.stored = asyncio.Event()  # set once the terminal state has reached the store (or writes gave up)
        self._arm_grace()  # the creator subscribes at once; a relay nobody ever reads must not run forever

    @property
    def state(self) -> str:
        return self._state

    @property
    def seq(self) -> int:
        return self._chain.seq

    @property
    def last_hash(self) -> str:
        return self._chain.last_hash

    @property
    def headers(self) -> dict[str, str]:
        return session_headers(self)

    def run(self, producer: Coroutine) -> asyncio.Task:
        """Run the coroutine that publishes the upstream chunks; it is cancelled when the session is interrupted."""
        if self._producer is not None:
            raise RuntimeError(f"session {self.session_id} already has a producer")
        self._producer = asyncio.get_running_loop().create_task(
            self._guard(producer), name=f"session-{self.session_id}"
        )
        return self._producer

    async def publish(self, chunk: Mapping) -> int:
        """Frame one upstream chunk, hand it to the subscribers and queue it for the store; returns its seq."""
        if self._state in TERMINAL:
            raise SessionClosed(f"session {self.session_id} is {self._state}")
        data = self._chain.frame_sse(chunk)
        self._last_chunk = chunk
        self._entries.append(data)
        self._pending.append(data)
        self._pending_fields.update(
            last_seq=self._chain.seq, last_hash=self._chain.last_hash, updated_at=self._owner.clock()
        )
        self._notify()
        self._schedule_flush()
        if len(self._pending) > MAX_PENDING:
            self._schedule_flush(now=True)
            await asyncio.shield(self._writer)
        return self._chain.seq

    async def finish(self) -> None:
        """Publish the summary chunk (`x_final: true`, empty choices) and end the session; waits for the store."""
        if self._state in TERMINAL:
            return
        last = self._last_chunk
        final = {key: last[key] for key in ("id", "object", "created", "model") if key in last}
        await self.publish({**final, "choices": [], "x_final": True})
        self._terminate(FINISHED)
        await self.stored.wait()

    def interrupt(self, reason: str) -> None:
        """End the session as interrupted (e.g. the engine failed mid-stream); cancels the producer."""
        self._terminate(INTERRUPTED, reason)

    def subscribe(self, after_seq: int = 0) -> Subscription:
        """A client's stream from after_seq on; an interrupted session answers with the interrupted event."""
        if self._state != INTERRUPTED and not 0 <= after_seq <= self._chain.seq:
            raise SeqOutOfRange(f"after={after_seq}, but session {self.session_id} has {self._chain.seq} chunks")
        return Subscription(self, after_seq)

    def interrupted_event(self) -> bytes:
        return interrupted_event(self.session_id, self._chain.seq, self.seed, self.reason)

    def record(self) -> SessionRecord:
        return SessionRecord(
            self.session_id, self.seed, self.meta, self._state, self.seq, self.last_hash,
            self.created_at, self._owner.clock(), self.reason,
        )  # fmt: skip

    async def _guard(self, producer: Coroutine) -> None:
        try:
            await producer
        except asyncio.CancelledError:
            self._terminate(INTERRUPTED, "cancelled")
            raise
        except Exception as exc:
            log.warning("session %s: producer failed: %r", self.session_id, exc)
            self._terminate(INTERRUPTED, "upstream_error")
        else:
            self._terminate(INTERRUPTED, "upstream_closed")  # no-op after finish(): the stream ended without [DONE]

    def _attach(self) -> None:
        self._subscribers += 1
        self._cancel_grace()
        if self._state == DETACHED:
            self._set_state(STREAMING)

    def _detach(self) -> None:
        self._subscribers -= 1
        if self._subscribers == 0 and self._state not in TERMINAL:
            self._set_state(DETACHED)
            self._arm_grace()

    def _arm_grace(self) -> None:
        self._cancel_grace()
        self._grace = asyncio.get_running_loop().call_later(self._owner.grace_s, self._grace_expired)

    def _cancel_grace(self) -> None:
        if self._grace is not None:
            self._grace.cancel()
            self._grace = None

    def _grace_expired(self) -> None:
        self._grace = None
        if self._subscribers == 0:
            self._terminate(INTERRUPTED, "client_gone")

    def _set_state(self, state: str) -> None:
        self._state = state
        self._pending_fields.update(state=state, updated_at=self._owner.clock())
        self._schedule_flush()

    def _terminate(self, state: str, reason: str = "") -> None:
        if self._state in TERMINAL:
            return
        self._cancel_grace()
        self.reason = reason
        self._pending_fields.update(reason=reason, last_seq=self.seq, last_hash=self.last_hash)
        self._set_state(state)
        self._notify()
        producer = self._producer
        if state == INTERRUPTED and producer is not None and producer is not asyncio.current_task():
            producer.cancel()  # closes the upstream request, so the engine stops generating

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def _schedule_flush(self, *, now: bool = False) -> None:
        if self._writer is not None and not self._writer.done():
            return  # the running writer takes whatever is pending when its current write returns
        interval = self._owner.flush_interval_s
        if now or interval <= 0 or self._state in TERMINAL:
            if self._flush_timer is not None:
                self._flush_timer.cancel()
                self._flush_timer = None
            self._writer = asyncio.get_running_loop().create_task(self._flush())
        elif self._flush_timer is None:
            self._flush_timer = asyncio.get_running_loop().call_later(interval, self._flush_due)

    def _flush_due(self) -> None:
        self._flush_timer = None
        self._schedule_flush(now=True)

    async def _flush(self) -> None:
        failures = 0
        while self._pending or self._pending_fields:
            entries, self._pending = self._pending, []
            fields, self._pending_fields = self._pending_fields, {}
            ttl_s = self._owner.ttl_s if self._state in TERMINAL else self._owner.active_ttl_s
            try:
                await self._owner.store.append(self.session_id, entries, fields, ttl_s=ttl_s)
                failures = 0
            except Exception as exc:  # the stream to the client must outlive a store hiccup
                failures += 1
                self._pending[:0] = entries
                self._pending_fields = {**fields, **self._pending_fields}
                log.warning("session %s: store write failed (%d): %r", self.session_id, failures, exc)
                if failures >= 3:
                    break
                await asyncio.sleep(0.1 * failures)
        if self._state in TERMINAL and not self.stored.is_set():
            self.stored.set()
            self._owner._forget(self)


class StreamSessions:
    """The sessions of one gateway process: starts relays, finds them for resumes, replays ended ones from the store."""

    def __init__(
        self,
        store: SessionStore | None = None,
        *,
        grace_s: float = DEFAULT_GRACE_S,
        ttl_s: float = DEFAULT_TTL_S,
        active_ttl_s: float = DEFAULT_ACTIVE_TTL_S,
        flush_interval_s: float = DEFAULT_FLUSH_INTERVAL_S,
        clock=time.time,
    ):
        self.store = store if store is not None else MemorySessionStore()
        self.grace_s = grace_s
        self.ttl_s = ttl_s
        self.active_ttl_s = active_ttl_s
        self.flush_interval_s = flush_interval_s
        self.clock = clock
        self._live: dict[str, SessionRelay] = {}

    @property
    def live(self) -> int:
        return len(self._live)

    async def start(
        self, session_id: str | None = None, seed: int | None = None, meta: Mapping | None = None
    ) -> SessionRelay:
        """Create a session (state `streaming`) and its relay; the caller then runs a producer and subscribes."""
        session_id = session_id or new_session_id()
        if not is_session_id(session_id):
            raise ValueError(f"invalid session id {session_id!r}")
        if session_id in self._live:
            raise ValueError(f"session {session_id} is already generating")
        seed = new_seed() if seed is None else int(seed)
        now = self.clock()
        record = SessionRecord(
            session_id, seed, dict(meta or {}), STREAMING, 0, genesis_hash(session_id, seed), now, now
        )
        await self.store.create(record, ttl_s=self.active_ttl_s)
        relay = SessionRelay(self, record)
        self._live[session_id] = relay
        return relay

    async def resume(self, session_id: str, after_seq: int = 0, *, owner: str | None = None) -> Subscription | Replay:
        """SSE bytes after `after_seq`: live chunks, the stored rest of a finished session, or the interrupted event.

        With `owner`, a session started by someone else (its meta's `owner` differs) is unknown to the caller."""
        if after_seq < 0:
            raise SeqOutOfRange(f"after={after_seq}")
        relay = self._live.get(session_id)
        if relay is not None:
            _check_owner(relay.meta, owner, session_id)
            return relay.subscribe(after_seq)
        if not is_session_id(session_id):
            raise SessionUnknown(session_id)
        record = await self.store.load(session_id)
        if record is None:
            raise SessionUnknown(session_id)
        _check_owner(record.meta, owner, session_id)
        if record.state == FINISHED:
            if after_seq > record.last_seq:
                raise SeqOutOfRange(f"after={after_seq}, but session {session_id} has {record.last_seq} chunks")
            return Replay([*await self.store.entries(session_id, after_seq), DONE], session_headers(record))
        if record.state != INTERRUPTED:
            # The store says it is generating but no relay here is: the gateway restarted mid-stream.
            record.state, record.reason = INTERRUPTED, "session_lost"
            fields = {"state": INTERRUPTED, "reason": "session_lost", "updated_at": self.clock()}
            await self.store.append(session_id, [], fields, ttl_s=self.ttl_s)
        event = interrupted_event(session_id, record.last_seq, record.seed, record.reason)
        return Replay([event, DONE], session_headers(record))

    async def info(self, session_id: str) -> SessionRecord | None:
        relay = self._live.get(session_id)
        if relay is not None:
            return relay.record()
        return await self.store.load(session_id) if is_session_id(session_id) else None

    async def close(self) -> None:
        """Interrupt every live generation (reason `gateway_stopped`), wait for the store, close it."""
        relays = list(self._live.values())
        for relay in relays:
            relay.interrupt("gateway_stopped")
        waiters = [asyncio.ensure_future(relay.stored.wait()) for relay in relays]
        if waiters:
            await asyncio.wait(waiters, timeout=5)  # a store that stopped answering must not hold up shut-down
        for waiter in waiters:
            waiter.cancel()
        await self.store.close()

    def _forget(self, relay: SessionRelay) -> None:
        if self._live.get(relay.session_id) is relay:
            del self._live[relay.session_id]


def _check_owner(meta: Mapping, owner: str | None, session_id: str) -> None:
    if owner is not None and not hmac.compare_digest(str(meta.get("owner", "")), owner):
        raise SessionUnknown(session_id)


async def pump_sse(relay: SessionRelay, lines: AsyncIterable[bytes]) -> None:
    """Publish every `data:` JSON of an upstream OpenAI SSE stream (lines, e.g. aiohttp's response.content).

    `[DONE]` finishes the session; a stream that ends without it leaves the relay to mark it interrupted.
    """
    async for line in lines:
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            await relay.finish()
            return
        await relay.publish(json.loads(data))


async def pump_chunks(relay: SessionRelay, chunks: AsyncIterable[Mapping]) -> None:
    """Publish every chunk object of an upstream answer, then finish the session.

    The iterator is closed when the producer is cancelled, so the upstream request it holds is closed as well.
    """
    try:
        async for chunk in chunks:
            await relay.publish(chunk)
    finally:
        aclose = getattr(chunks, "aclose", None)
        if aclose is not None:
            await aclose()
    await relay.finish()
