"""Coalesces agent reports that arrive together: ACKs of one rollout, plain heartbeats and warmup progress.

ACKs: one UPDATE per version and one browser event per pool, per flush.

All agents of a pool answer a push within milliseconds of each other; writing and broadcasting each ACK
on its own made a 500-node rollout take seconds. Each consumer awaits its ACK's flush, so nothing is
reported to browsers before it is stored.

A database error is recorded in the loops' health record and the write tried again after a pause: ACKs are kept
(their consumers wait) and given up only after the last retry, when their connections close so that the agents'
hellos carry them again; heartbeats are kept for the next window.
"""

import asyncio
from collections import defaultdict
from dataclasses import dataclass

from channels.db import DatabaseSyncToAsync
from django.db import InterfaceError, OperationalError

from controlplane.lib import loop_health
from controlplane.nodes import realtime
from controlplane.nodes.services import agent_sessions

FLUSH_WINDOW_S = 0.005
ACK_LOOP = "agent-acks"
SEEN_LOOP = "agent-heartbeats"
WARMUP_LOOP = "agent-warmup-progress"
# Pauses before the ACKs of a failed flush are written again; each try also waits out the database's busy timeout.
RETRY_DELAYS_S = (0.5, 1.0, 2.0, 4.0)
# Heartbeats and warmup reports of a failed flush wait for a later window, at most this long once failures pile up.
MAX_SEEN_BACKOFF_S = 30.0
# Agents report a warmup's progress twice a second each; a rollout warms every node of a pool at once.
WARMUP_WINDOW_S = 0.5
_RUNNING = "running"


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
        loop_health.loop_register(ACK_LOOP, description="agents' ACKs of pushed configs, stored in batches")

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
            error = await self._store([ack for ack, _ in batch])
            for _, future in batch:
                if not future.done():
                    if error is None:
                        future.set_result(None)
                    else:
                        future.set_exception(error)

    async def _store(self, acks: list[Ack]) -> Exception | None:
        """Write the ACKs (an idempotent UPDATE per version: a retry is safe), tell browsers; the error if unstored."""
        groups: dict[tuple[str, int], list[int]] = defaultdict(list)
        for ack in acks:
            groups[(ack.content_hash, ack.version_id)].append(ack.node_id)
        context = f"storing {len(acks)} ACK(s) from {', '.join(sorted({ack.node for ack in acks}))}"
        for delay in (*RETRY_DELAYS_S, None):
            try:
                for (content_hash, version_id), node_ids in groups.items():
                    await DatabaseSyncToAsync(agent_sessions.nodes_config_acked, thread_sensitive=False)(
                        node_ids=node_ids, content_hash=content_hash, version_id=version_id
                    )
            except (OperationalError, InterfaceError) as exc:
                loop_health.loop_failed(ACK_LOOP, exc, context=context)
                if delay is None:
                    return exc
                await asyncio.sleep(delay)
            except Exception as exc:
                loop_health.loop_failed(ACK_LOOP, exc, context=context)
                return exc
            else:
                break
        try:
            await realtime.nodes_acked(acks)
        except Exception as exc:  # stored: only the browsers' live view missed it
            loop_health.loop_failed(ACK_LOOP, exc, context=f"broadcasting {len(acks)} ACK(s)")
            return None
        loop_health.loop_succeeded(ACK_LOOP)
        return None


class SeenBatcher:
    """Heartbeats that change nothing but `last_seen_at`, written once a second for all nodes together."""

    def __init__(self, window_s: float = 1.0):
        self.window_s = window_s
        self._pending: set[int] = set()
        self._flusher: asyncio.Task | None = None
        self._failures = 0
        loop_health.loop_register(SEEN_LOOP, description="agents' plain heartbeats, stored once a second")

    def record(self, node_id: int) -> None:
        self._pending.add(node_id)
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush())

    async def _flush(self) -> None:
        while self._pending:
            await asyncio.sleep(self.window_s)
            node_ids, self._pending = sorted(self._pending), set()
            try:
                await DatabaseSyncToAsync(agent_sessions.nodes_seen, thread_sensitive=False)(node_ids=node_ids)
            except Exception as exc:
                self._failures += 1
                loop_health.loop_failed(SEEN_LOOP, exc, context=f"last_seen_at of {len(node_ids)} node(s)")
                self._pending.update(node_ids)
                await asyncio.sleep(min(self.window_s * 2**self._failures, MAX_SEEN_BACKOFF_S))
            else:
                self._failures = 0
                loop_health.loop_succeeded(SEEN_LOOP)


class WarmupBatcher:
    """Warmup progress, written for all nodes together every `WARMUP_WINDOW_S` in one transaction.

    A node's running reports within a window replace each other (a person sees the newest); a finished one (passed,
    failed, skipped) is always written, in order, so a failure is recorded even if a new run starts right after.
    """

    def __init__(self, window_s: float = WARMUP_WINDOW_S):
        self.window_s = window_s
        self._pending: dict[int, list[dict]] = {}
        self._flusher: asyncio.Task | None = None
        self._failures = 0
        loop_health.loop_register(WARMUP_LOOP, description="agents' warmup progress, stored twice a second")

    def record(self, node_id: int, progress: dict) -> None:
        reports = self._pending.setdefault(node_id, [])
        if reports and reports[-1].get("state") == _RUNNING and progress.get("state") == _RUNNING:
            reports[-1] = progress
        else:
            reports.append(progress)
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush())

    async def _flush(self) -> None:
        while self._pending:
            await asyncio.sleep(self.window_s)
            reports, self._pending = self._pending, {}
            try:
                await DatabaseSyncToAsync(agent_sessions.nodes_warmup_progress, thread_sensitive=False)(reports=reports)
            except Exception as exc:
                self._failures += 1
                loop_health.loop_failed(WARMUP_LOOP, exc, context=f"warmup progress of {len(reports)} node(s)")
                for node_id, older in reports.items():
                    self._pending[node_id] = older + self._pending.get(node_id, [])
                await asyncio.sleep(min(self.window_s * 2**self._failures, MAX_SEEN_BACKOFF_S))
            else:
                self._failures = 0
                loop_health.loop_succeeded(WARMUP_LOOP)


_batchers: dict[asyncio.AbstractEventLoop, tuple[AckBatcher, SeenBatcher, WarmupBatcher]] = {}


def _for_loop() -> tuple[AckBatcher, SeenBatcher, WarmupBatcher]:
    loop = asyncio.get_running_loop()
    if loop not in _batchers:
        _batchers[loop] = (AckBatcher(), SeenBatcher(), WarmupBatcher())
    return _batchers[loop]


def ack_batcher() -> AckBatcher:
    return _for_loop()[0]


def seen_batcher() -> SeenBatcher:
    return _for_loop()[1]


def warmup_batcher() -> WarmupBatcher:
    return _for_loop()[2]
