"""Where sessions outlive a connection: in this process (embedded mode) or in Redis."""

from __future__ import annotations

import json
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from engine_node.sessions.framing import canonical_json

STREAMING, DETACHED, FINISHED, INTERRUPTED = "streaming", "detached", "finished", "interrupted"
TERMINAL = frozenset({FINISHED, INTERRUPTED})


@dataclass
class SessionRecord:
    """What a store keeps about a session besides its chunks."""

    session_id: str
    seed: int
    meta: dict = field(default_factory=dict)
    state: str = STREAMING
    last_seq: int = 0
    last_hash: str = ""
    created_at: float = 0.0
    updated_at: float = 0.0
    reason: str = ""


class SessionStore(Protocol):
    """Where sessions outlive a connection. Chunk k (seq k) is entry k - 1; entries are SSE bytes as sent."""

    async def create(self, record: SessionRecord, *, ttl_s: float) -> None: ...

    async def append(self, session_id: str, entries: Sequence[bytes], fields: Mapping, *, ttl_s: float) -> None:
        """Append entries, set record fields, and expire the session ttl_s from now."""

    async def load(self, session_id: str) -> SessionRecord | None: ...

    async def entries(self, session_id: str, start: int = 0) -> list[bytes]: ...

    async def close(self) -> None: ...


@dataclass
class _MemoryItem:
    record: SessionRecord
    entries: list[bytes]
    expires_at: float
    size: int = 0


class MemorySessionStore:
    """Sessions in this process (embedded mode). Over max_bytes, the oldest finished sessions are dropped first."""

    def __init__(self, *, max_bytes: int = 256 * 1024 * 1024, clock=time.monotonic):
        self._items: OrderedDict[str, _MemoryItem] = OrderedDict()
        self._max_bytes = max_bytes
        self._bytes = 0
        self._clock = clock
        self._swept_at = 0.0

    @property
    def size_bytes(self) -> int:
        return self._bytes

    async def create(self, record: SessionRecord, *, ttl_s: float) -> None:
        now = self._clock()
        if now - self._swept_at > 1.0:
            self._swept_at = now
            for session_id in [s for s, item in self._items.items() if item.expires_at <= now]:
                self._drop(session_id)
        self._drop(record.session_id)
        self._items[record.session_id] = _MemoryItem(replace(record, meta=dict(record.meta)), [], now + ttl_s)

    async def append(self, session_id: str, entries: Sequence[bytes], fields: Mapping, *, ttl_s: float) -> None:
        item = self._live(session_id)
        if item is None:
            return
        if entries:
            size = sum(map(len, entries))
            item.entries.extend(entries)
            item.size += size
            self._bytes += size
        for name, value in fields.items():
            setattr(item.record, name, value)
        item.expires_at = self._clock() + ttl_s
        if self._bytes > self._max_bytes:
            for sid in [s for s, i in self._items.items() if i.record.state in TERMINAL]:
                if self._bytes <= self._max_bytes:
                    break
                self._drop(sid)

    async def load(self, session_id: str) -> SessionRecord | None:
        item = self._live(session_id)
        return None if item is None else replace(item.record)

    async def entries(self, session_id: str, start: int = 0) -> list[bytes]:
        item = self._live(session_id)
        return [] if item is None else item.entries[start:]

    async def close(self) -> None:
        self._items.clear()
        self._bytes = 0

    def _live(self, session_id: str) -> _MemoryItem | None:
        item = self._items.get(session_id)
        if item is not None and item.expires_at <= self._clock():
            self._drop(session_id)
            return None
        return item

    def _drop(self, session_id: str) -> None:
        item = self._items.pop(session_id, None)
        if item is not None:
            self._bytes -= item.size


class RedisSessionStore:
    """Sessions in Redis: a hash `engine_node:session:<node>:<id>` and a list `...:<id>:chunks`, written pipelined."""

    def __init__(self, redis_or_url, *, node: str):
        if isinstance(redis_or_url, str):
            import redis.asyncio  # only nodes configured with Redis need the package

            redis_or_url = redis.asyncio.Redis.from_url(redis_or_url)
        self.redis = redis_or_url
        self.prefix = f"engine_node:session:{node}:"

    def keys(self, session_id: str) -> tuple[str, str]:
        return self.prefix + session_id, self.prefix + session_id + ":chunks"

    async def create(self, record: SessionRecord, *, ttl_s: float) -> None:
        meta_key, chunks_key = self.keys(record.session_id)
        fields = {name: _encode(name, value) for name, value in record.__dict__.items() if name != "session_id"}
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.delete(chunks_key)
            pipe.hset(meta_key, mapping=fields)
            pipe.pexpire(meta_key, int(ttl_s * 1000))
            await pipe.execute()

    async def append(self, session_id: str, entries: Sequence[bytes], fields: Mapping, *, ttl_s: float) -> None:
        meta_key, chunks_key = self.keys(session_id)
        ttl_ms = int(ttl_s * 1000)
        async with self.redis.pipeline(transaction=False) as pipe:
            if entries:
                pipe.rpush(chunks_key, *entries)
            if fields:
                pipe.hset(meta_key, mapping={name: _encode(name, value) for name, value in fields.items()})
            pipe.pexpire(meta_key, ttl_ms)
            pipe.pexpire(chunks_key, ttl_ms)
            await pipe.execute()

    async def load(self, session_id: str) -> SessionRecord | None:
        raw = await self.redis.hgetall(self.keys(session_id)[0])
        if not raw or b"seed" not in raw:
            return None
        values = {key.decode(): value.decode() for key, value in raw.items()}
        return SessionRecord(
            session_id=session_id,
            seed=int(values["seed"]),
            meta=json.loads(values.get("meta", "{}")),
            state=values.get("state", STREAMING),
            last_seq=int(values.get("last_seq", 0)),
            last_hash=values.get("last_hash", ""),
            created_at=float(values.get("created_at", 0)),
            updated_at=float(values.get("updated_at", 0)),
            reason=values.get("reason", ""),
        )

    async def entries(self, session_id: str, start: int = 0) -> list[bytes]:
        return await self.redis.lrange(self.keys(session_id)[1], start, -1)

    async def close(self) -> None:
        await self.redis.aclose()


def _encode(name: str, value: Any) -> str | int | float:
    return canonical_json(value) if name == "meta" else value
