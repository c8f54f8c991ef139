"""Coalesces agent reports that arrive together: ACKs of one rollout, and plain heartbeats.

ACKs: one UPDATE per version and one browser event per pool, per flush.

All agents of a pool answer a push within milliseconds of each other; writing and broadcasting each ACK
on its own made a 500-node rollout take seconds. Each consumer awaits its ACK's flush, so nothing is
reported to browsers before it is stored.
"""

import asyncio
from collections import defaultdict
from dataclasses import dataclass

from channels.db import DatabaseSyncToAsync

from controlplane.nodes import realtime
from controlplane.nodes.services import agent_sessions

FLUSH_WINDOW_S = 0.005


@dataclass(frozen=True)
class Ack:
    node_id: int
    node: str
    pool: str
    content_hash: str
    version_id: int
    version: dict
    in_sync: bool


class AckBatcher:
    """One per event loop (per ASGI process); consumers call `record` and resume once it is stored."""

    def __init__(self):
        self._pending: list[tuple[Ack, asyncio.Future]] = []
        self._flusher: asyncio.Task | None = None

    async def record(self, ack: Ack) -> None:
        future = asyncio.get_running_loop().create_future()
        self._pending.append((ack, future))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush())
        await future

    async def _flush(self) -> None:
        while self._pending:
            await asyncio.sleep(FLUSH_WINDOW_S)
            batch, self._pending = self._pending, []
            acks = [ack for ack, _ in batch]
            try:
                groups: dict[tuple[str, int], list[int]] = defaultdict(list)
                for ack in acks:
                    groups[(ack.content_hash, ack.version_id)].append(ack.node_id)
                for (content_hash, version_id), node_ids in groups.items():
                    await DatabaseSyncToAsync(agent_sessions.nodes_config_acked, thread_sensitive=False)(
                        node_ids=node_ids, content_hash=content_hash, version_id=version_id
                    )
                await realtime.nodes_acked(acks)
            except Exception as exc:
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
            else:
                for _, future in batch:
                    if not future.done():
                        future.set_result(None)


class SeenBatcher:
    """Heartbeats that change nothing but `last_seen_at`, written once a second for all nodes together."""

    def __init__(self, window_s: float = 1.0):
        self.window_s = window_s
        self._pending: set[int] = set()
        self._flusher: asyncio.Task | None = None

    def record(self, node_id: int) -> None:
        self._pending.add(node_id)
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush())

    async def _flush(self) -> None:
        while self._pending:
            await asyncio.sleep(self.window_s)
            node_ids, self._pending = sorted(self._pending), set()
            await DatabaseSyncToAsync(agent_sessions.nodes_seen, thread_sensitive=False)(node_ids=node_ids)


_batchers: dict[asyncio.AbstractEventLoop, tuple[AckBatcher, SeenBatcher]] = {}


def _for_loop() -> tuple[AckBatcher, SeenBatcher]:
    loop = asyncio.get_running_loop()
    if loop not in _batchers:
        _batchers[loop] = (AckBatcher(), SeenBatcher())
    return _batchers[loop]


def ack_batcher() -> AckBatcher:
    return _for_loop()[0]


def seen_batcher() -> SeenBatcher:
    return _for_loop()[1]
