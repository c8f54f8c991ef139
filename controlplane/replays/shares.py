"""One share of a replay run: its part of the plan sent open loop from one event loop, its rows written in batches.

The event loop never touches the database: rows and counts go to one writer thread every half second (or every
`BATCH_ROWS` rows), which also reads the run's status, so a cancel stops the share's sending within a second.
"""

import asyncio
import contextlib
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import aiohttp
from django.conf import settings
from django.db import connections

from controlplane.replays import lifecycle
from controlplane.replays import plan as planning
from controlplane.replays.models import ReplayRequest, ReplayRun
from controlplane.replays.realtime import replay_progress
from engine_node.replay_load import Outcome, Shot, open_loop

logger = logging.getLogger(__name__)

FLUSH_EVERY_S = 0.5
# Achieved QPS and P99 so far read every row of the run: one share (index 0) works them out, this often.
LIVE_FIGURES_EVERY_S = 2.0
BATCH_ROWS = 500
# Requests still in flight when a cancel arrives get this long before they are cut (recorded as "cancelled").
CANCEL_GRACE_S = 1.0
# aiohttp's pool per share: enough sockets for the share's concurrency at the QPS cap and a slow pool.
CONNECTION_LIMIT = 1000


def shots_of(run: ReplayRun, planned: list[planning.Planned]) -> list[Shot]:
    targets = run.targets
    names = [target["name"] for target in targets]
    by_name = {target["name"]: target for target in targets}
    shots = []
    for request in planned:
        target = by_name[planning.node_for(request.seq, names)]
        body = {"model": target["model"], "messages": list(request.messages), "stream": run.stream}
        if run.stream:
            body["stream_options"] = {"include_usage": True}
        shots.append(Shot(request.seq, request.at, target["url"], body))
    return shots


class _Recorder:
    """Outcomes of the event loop, handed to the writer thread in batches."""

    def __init__(self, run_id: int, planned: dict[int, planning.Planned], nodes: list[str], *, live: bool):
        self.run_id = run_id
        self.live = live
        self.figures_at = 0.0
        self.planned = planned
        self.nodes = nodes
        self.lock = threading.Lock()
        self.rows: list[ReplayRequest] = []
        self.sent = self.done = self.errors = 0
        self.status = ReplayRun.Status.RUNNING
        self.write_error = ""

    def on_sent(self, outcome: Outcome) -> None:
        with self.lock:
            self.sent += 1

    def on_outcome(self, outcome: Outcome) -> None:
        request = self.planned[outcome.seq]
        row = ReplayRequest(
            run_id=self.run_id,
            seq=outcome.seq,
            conversation_id=request.conversation_id[:200],
            turn=min(request.turn, 32767),
            intent=outcome.intent,
            intent_confidence=outcome.intent_confidence,
            tier=outcome.tier,
            tier_rule=outcome.tier_rule,
            node_name=outcome.node or planning.node_for(outcome.seq, self.nodes),
            scheduled_at=outcome.due_s,
            sent_at=outcome.sent_s,
            status_code=outcome.status_code,
            ok=outcome.ok,
            error=outcome.error[:300],
            e2e_s=outcome.e2e_s,
            ttft_s=outcome.ttft_s,
            first_round_s=outcome.first_round_s,
            reply_tokens=outcome.reply_tokens,
            prompt_tokens=outcome.prompt_tokens,
            continuation_rounds=outcome.continuation_rounds,
            max_tokens=outcome.max_tokens,
        )
        with self.lock:
            self.rows.append(row)
            self.done += 1
            self.errors += 0 if outcome.ok else 1

    def take(self) -> tuple[list[ReplayRequest], int, int, int]:
        with self.lock:
            taken = (self.rows, self.sent, self.done, self.errors)
            self.rows, self.sent, self.done, self.errors = [], 0, 0, 0
        return taken

    def flush(self) -> None:
        """Writer thread: rows in batches, counts added, live figures and status read back, progress pushed."""
        rows, sent, done, errors = self.take()
        for start in range(0, len(rows), BATCH_ROWS):
            ReplayRequest.objects.bulk_create(rows[start : start + BATCH_ROWS])
        self.status = lifecycle.add_progress(self.run_id, sent=sent, done=done, errors=errors)
        if self.live and time.monotonic() - self.figures_at >= LIVE_FIGURES_EVERY_S:
            self.figures_at = time.monotonic()
            ReplayRun.objects.filter(pk=self.run_id).update(**lifecycle.live_figures(self.run_id))
        if rows or sent:
            replay_progress(self.run_id)

    def stopped(self) -> bool:
        return self.status != ReplayRun.Status.RUNNING


def replay_share(run_id: int, index: int, key: str) -> None:
    """Send share `index` of a running run, then count it finished (the last share ends the run)."""
    run = ReplayRun.objects.filter(pk=run_id).first()
    if run is None or run.status not in (ReplayRun.Status.RUNNING, ReplayRun.Status.CANCELLING):
        return
    try:
        lifecycle.targets_checked(run.targets)
    except lifecycle.StartFailed as exc:  # stored before this check existed, or a name that now resolves elsewhere
        lifecycle.share_finished(run_id, cpu_s=0.0, error=f"share {index}: {exc}")
        return
    cpu_s = 0.0
    error = ""
    writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"replay-{run_id}-writer")
    try:
        planned = planning.share_of(lifecycle.run_plan(run), index=index, shares=run.shares)
        recorder = _Recorder(run_id, {p.seq: p for p in planned}, [t["name"] for t in run.targets], live=index == 0)
        recorder.status = run.status
        shots = shots_of(run, planned)
        # The generator's own CPU: this thread's event loop, not the plan's drawing nor the writer thread.
        cpu_started = time.thread_time()
        try:
            asyncio.run(_send(run, shots, recorder, writer, key))
        finally:
            cpu_s = time.thread_time() - cpu_started
        writer.submit(recorder.flush).result()
        if recorder.write_error:
            error = f"share {index}: {recorder.write_error}"
    except Exception as exc:
        logger.exception("replay %s share %s failed", run_id, index)
        error = f"share {index}: {type(exc).__name__}: {exc}"
    finally:
        writer.submit(connections.close_all).result()
        writer.shutdown()
    lifecycle.share_finished(run_id, cpu_s=cpu_s, error=error)


async def _send(run: ReplayRun, shots: list[Shot], recorder: _Recorder, writer: ThreadPoolExecutor, key: str) -> None:
    loop = asyncio.get_running_loop()
    done = asyncio.Event()

    async def flusher() -> None:
        while not done.is_set():
            try:
                await loop.run_in_executor(writer, recorder.flush)
            except Exception as exc:  # a batch the database refused: keep sending and reading the status
                logger.exception("replay %s: writing a batch failed", run.pk)
                recorder.write_error = recorder.write_error or f"writing rows failed: {type(exc).__name__}: {exc}"
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), FLUSH_EVERY_S)

    flushing = asyncio.create_task(flusher())
    timeout = aiohttp.ClientTimeout(total=settings.REPLAY_REQUEST_TIMEOUT_S)
    connector = aiohttp.TCPConnector(limit=CONNECTION_LIMIT)
    headers = {"Authorization": f"Bearer {key}"}
    try:
        async with aiohttp.ClientSession(timeout=timeout, connector=connector, headers=headers) as session:
            await open_loop(
                shots,
                start_at=run.schedule_start,
                session=session,
                on_outcome=recorder.on_outcome,
                stopped=recorder.stopped,
                until_s=run.duration_cap_s,
                grace_s=CANCEL_GRACE_S,
                sent_hook=recorder.on_sent,
            )
    finally:
        done.set()
        await flushing
