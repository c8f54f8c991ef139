"""Sample ingestion: agents' 1 Hz samples become node rows, pool and fleet aggregates, and live browser events.

The agent consumer hands each sample to the event loop's `SampleIngestor` and goes on: no database call per sample
(200 nodes at 1 Hz would be 200 round trips a second). At most every `FLUSH_INTERVAL_S` (a first sample after a
quiet spell at once, so a lone node's figures do not wait out the interval) the ingestor

1. takes the samples received since the last flush and keeps each node's newest as its latest sample;
2. forgets nodes not heard from for `LATEST_MAX_AGE_S` (a lost node leaves the pool's figures, it does not freeze
   them);
3. recomputes the aggregates (`controlplane/metrics/aggregation.py`) of the pools that received a sample, and of the
   fleet, over the nodes' latest samples;
4. sends `metrics.sample` events for those nodes, pools and the fleet (`controlplane/metrics/realtime.py`);
5. queues the rows for the database: every node sample as it came, and one aggregate row per pool and for the fleet
   per second of the control plane's clock (a flush in the same second replaces the row: an upsert).

Events go out before the rows are written, and a single writer task stores the queue in the background, so neither a
slow database nor a slow browser delays the next flush. A write that fails (a database locked past its busy timeout)
puts its rows back at the head of the queue and the writer tries again after a pause, recorded in the loops' health
record; only a queue past `MAX_QUEUED_ROWS` loses rows, and counts them. With Redis, step 3 runs over every
process's nodes: each flush shares this process's newest samples and reads the others' in one round trip
(`controlplane/metrics/shared_latest.py`), so several ASGI processes each holding some agents compute the same
complete pool and fleet figures; if Redis fails for a flush, that flush aggregates this process's nodes alone.
"""

import asyncio
import logging
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime

from channels.db import DatabaseSyncToAsync
from django.conf import settings

from controlplane.lib import loop_health
from controlplane.metrics import realtime
from controlplane.metrics.aggregation import aggregate
from controlplane.metrics.models import MetricSample
from controlplane.metrics.samples import SampleRejected, sample_parse
from controlplane.metrics.shared_latest import SharedLatest

log = logging.getLogger(__name__)

FLUSH_INTERVAL_S = 0.25
GATHER_S = 0.005
# Samples come every second; a node missing three of them no longer counts in its pool's figures.
LATEST_MAX_AGE_S = 3.0
# Rows waiting for a database that does not keep up: beyond this the oldest are dropped (and counted).
MAX_QUEUED_ROWS = 100_000
DROP_LOG_INTERVAL_S = 60.0
# After a failed write the writer waits this long, doubled per failure in a row, up to MAX_WRITE_BACKOFF_S.
WRITE_BACKOFF_S = 0.5
MAX_WRITE_BACKOFF_S = 30.0
FLUSH_LOOP = "metrics-ingest"
WRITE_LOOP = "metrics-store"

# Process-wide counters (the ingestors of all event loops), for the control plane's own /metrics.
counters: Counter = Counter()
_drop_logged_at: dict[str, float] = {}
_drops_unlogged: Counter = Counter()


@dataclass
class _Latest:
    pool: str
    t: float  # the agent's clock
    m: dict
    received_at: float  # this process's monotonic clock: staleness never depends on an agent's clock


class SampleIngestor:
    """One per event loop (per ASGI process); the agent consumer calls `record` for every sample message."""

    def __init__(self, *, flush_interval_s: float = FLUSH_INTERVAL_S, max_age_s: float = LATEST_MAX_AGE_S):
        self.flush_interval_s = flush_interval_s
        self.max_age_s = max_age_s
        self._received: list[tuple[str, str, float, dict]] = []  # node, pool, t, m
        self.latest: dict[str, _Latest] = {}
        self._node_rows: list[MetricSample] = []
        self._aggregate_rows: dict[tuple[str, str, datetime], MetricSample] = {}
        self._flusher: asyncio.Task | None = None
        self._writer: asyncio.Task | None = None
        self._last_flush_at = -flush_interval_s
        self._write_failures = 0
        self.shared = SharedLatest(settings.REDIS_URL) if settings.REDIS_URL else None
        loop_health.loop_register(FLUSH_LOOP, description="agents' 1 Hz samples: aggregates and live charts")
        loop_health.loop_register(WRITE_LOOP, description="agents' samples and aggregates written in batches")

    def record(self, *, node: str, pool: str, message) -> bool:
        """Check and queue one sample; a bad one is counted, logged and dropped. Never raises, never waits."""
        try:
            t, m = sample_parse(message, now=time.time())
        except SampleRejected as exc:
            _dropped(node, exc.reason)
            return False
        except Exception:  # a sample must never break the agent's connection
            log.exception("node %s: sample check failed", node)
            _dropped(node, "unreadable")
            return False
        counters["samples_accepted"] += 1
        self._received.append((node, pool, t, m))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._run())
        return True

    async def _run(self) -> None:
        while self._received:
            # At most one flush per interval, on a fixed beat; the first sample after a quiet spell goes at once
            # (after a moment to gather the samples sent with it) instead of waiting out a whole interval.
            due = self._last_flush_at + self.flush_interval_s - time.monotonic()
            await asyncio.sleep(max(due, GATHER_S))
            self._last_flush_at = time.monotonic()
            try:
                await self.flush()
            except Exception as exc:
                loop_health.loop_failed(FLUSH_LOOP, exc, context="aggregating and broadcasting samples")
            else:
                loop_health.loop_succeeded(FLUSH_LOOP)

    async def flush(self) -> None:
        received, self._received = self._received, []
        if not received:
            return
        now = time.monotonic()
        second = datetime.fromtimestamp(int(time.time()), tz=UTC)
        newest: dict[str, tuple[str, float, dict]] = {}
        for node, pool, t, m in received:
            self._node_rows.append(
                MetricSample(
                    scope=MetricSample.Scope.NODE, name=node, pool=pool, t=_datetime(t), resolution_s=1, values=m
                )
            )
            latest = self.latest.get(node)
            if latest is None or t >= latest.t or latest.pool != pool:
                self.latest[node] = _Latest(pool=pool, t=t, m=m, received_at=now)
                newest[node] = (pool, t, m)
            else:  # a late sample: stored, but the node's newer figures stay its latest
                latest.received_at = now
        for node in [n for n, latest in self.latest.items() if now - latest.received_at > self.max_age_s]:
            del self.latest[node]
        view = {node: (latest.pool, latest.t, latest.m) for node, latest in self.latest.items()}
        if self.shared is not None and newest:
            try:
                view = await self.shared.exchange(newest, max_age_s=self.max_age_s)
            except Exception:  # Redis away for a moment: this flush covers this process's nodes alone
                counters["shared_exchange_failed"] += 1
                log.warning("metrics: sharing samples with the other processes failed", exc_info=True)
            view.update(newest)  # this process's newest figures, whatever the others wrote meanwhile
        events = self._aggregates(newest, view, second) if newest else []
        self._trim_queue()
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write())
        await realtime.metrics_samples_send(events)

    def _aggregates(self, newest: dict[str, tuple[str, float, dict]], view: dict, second: datetime) -> list:
        """Events for the fleet, the pools with a new sample and those nodes; queues the aggregate rows. `view`: every
        node's latest (pool, t, m) the aggregates cover."""
        events = []
        fleet_t, fleet_values = _aggregate(view, None)
        events.append(
            realtime.metrics_sample(scope="fleet", name=MetricSample.FLEET_NAME, t=fleet_t, values=fleet_values)
        )
        self._queue_aggregate(MetricSample.Scope.FLEET, MetricSample.FLEET_NAME, "", second, fleet_values)
        for pool in sorted({pool for pool, _, _ in newest.values()}):
            pool_t, pool_values = _aggregate(view, pool)
            events.append(realtime.metrics_sample(scope="pool", name=pool, t=pool_t, values=pool_values))
            self._queue_aggregate(MetricSample.Scope.POOL, pool, pool, second, pool_values)
        for node, (_, t, m) in newest.items():
            events.append(realtime.metrics_sample(scope="node", name=node, t=t, values=m))
        return events

    def _queue_aggregate(self, scope: str, name: str, pool: str, second: datetime, values: dict) -> None:
        row = MetricSample(scope=scope, name=name, pool=pool, t=second, resolution_s=1, values=values)
        self._aggregate_rows[(scope, name, second)] = row

    def _trim_queue(self) -> None:
        excess = len(self._node_rows) - MAX_QUEUED_ROWS
        if excess > 0:
            del self._node_rows[:excess]
            counters["rows_dropped"] += excess
            log.error("metrics: the database is not keeping up; dropped the %d oldest queued samples", excess)

    async def _write(self) -> None:
        while self._node_rows or self._aggregate_rows:
            node_rows, self._node_rows = self._node_rows, []
            aggregate_rows, self._aggregate_rows = list(self._aggregate_rows.values()), {}
            try:
                await DatabaseSyncToAsync(metric_samples_store, thread_sensitive=False)(
                    node_rows=node_rows, aggregate_rows=aggregate_rows
                )
            except Exception as exc:
                self._write_failures += 1
                context = f"storing {len(node_rows)} samples and {len(aggregate_rows)} aggregates"
                loop_health.loop_failed(WRITE_LOOP, exc, context=context)
                self._requeue(node_rows, aggregate_rows)
                await asyncio.sleep(min(WRITE_BACKOFF_S * 2 ** (self._write_failures - 1), MAX_WRITE_BACKOFF_S))
            else:
                self._write_failures = 0
                loop_health.loop_succeeded(WRITE_LOOP)

    def _requeue(self, node_rows: list[MetricSample], aggregate_rows: list[MetricSample]) -> None:
        """Rows of a failed write go back before those queued since; a newer aggregate of the same second wins."""
        for row in (*node_rows, *aggregate_rows):
            row.pk, row._state.adding, row._state.db = None, True, None
        self._node_rows[:0] = node_rows
        failed = {(row.scope, row.name, row.t): row for row in aggregate_rows}
        self._aggregate_rows = {**failed, **self._aggregate_rows}
        self._trim_queue()


def metric_samples_store(*, node_rows: list[MetricSample], aggregate_rows: list[MetricSample]) -> None:
    """Insert node samples (a repeated one is ignored) and upsert the aggregates of their seconds."""
    if node_rows:
        MetricSample.objects.bulk_create(node_rows, ignore_conflicts=True)
    if aggregate_rows:
        MetricSample.objects.bulk_create(
            aggregate_rows,
            update_conflicts=True,
            unique_fields=["scope", "name", "resolution_s", "t"],
            update_fields=["values", "pool"],
        )


def _aggregate(view: dict[str, tuple[str, float, dict]], pool: str | None) -> tuple[float, dict]:
    """The fleet's (pool None) or one pool's figures over the nodes' latest samples in `view`, and the newest t."""
    included = [(t, m) for node_pool, t, m in view.values() if pool is None or node_pool == pool]
    return max(t for t, _ in included), aggregate([m for _, m in included])


def _datetime(t: float) -> datetime:
    return datetime.fromtimestamp(t, tz=UTC)


def _dropped(node: str, reason: str) -> None:
    """Count every dropped sample; log at most one line per node a minute (a broken agent sends one a second)."""
    counters["samples_dropped"] += 1
    now = time.monotonic()
    if now - _drop_logged_at.get(node, -DROP_LOG_INTERVAL_S) < DROP_LOG_INTERVAL_S:
        _drops_unlogged[node] += 1
        return
    _drop_logged_at[node] = now
    also = _drops_unlogged.pop(node, 0)
    log.warning(
        "node %s: sample dropped: %s%s", node, reason, f" (and {also} more dropped since the last line)" if also else ""
    )


_ingestors: dict[asyncio.AbstractEventLoop, SampleIngestor] = {}


def sample_ingestor() -> SampleIngestor:
    loop = asyncio.get_running_loop()
    if loop not in _ingestors:
        for closed in [other for other in _ingestors if other.is_closed()]:
            del _ingestors[closed]
        _ingestors[loop] = SampleIngestor()
    return _ingestors[loop]
