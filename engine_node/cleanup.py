"""Memory cleanup on one node: drain, reset the prefix cache, release cached allocator blocks, resume.

The agent runs it on an SRE's command (op `cleanup`, also sent node by node by a pool cleanup) and on its own
when fragmentation passes the template's `cleanup.fragmentation_threshold` or every `cleanup.interval_s`; an
automatic one first asks the control plane for the pool's lease (`cleanup_request`), which dispatches it as a
command to one node of the pool at a time. Every admitted request finishes: the gate closes, in-flight requests
run to their end (new ones wait in the queue), and only an idle engine is reset. A drain that does not finish,
or a cleanup that passes `cleanup.max_duration_s`, resumes anyway and reports failure. Figures before and after
(engine_node/fragmentation.py) go into the command result as JSON and into engine_node_memory_cleanup_* metrics.

Releasing cached blocks is the worker extension's torch.cuda.empty_cache() on vLLM (a no-op on the CPU build,
where sleep mode frees nothing either) and the simulator's model of it. Sleep/wake-up would also work on CUDA but
throws away the weights' and KV cache's mappings and takes seconds to come back, for no more fragmentation gone.
"""

import asyncio
import json
import logging
import math
import time
from collections.abc import Awaitable, Callable

import aiohttp

from engine_node import metrics
from engine_node.admission import Admission
from engine_node.fragmentation import (
    RELEASE_METHOD,
    RPC_TIMEOUT_S,
    EngineCallFailed,
    WorkerCalls,
    read_fragmentation,
)
from engine_node.telemetry.memory import fragmentation_figure

log = logging.getLogger("engine_node.cleanup")

# The `cleanup` section's defaults, copied from controlplane/params/schema.py because engine_node never imports
# the control plane; tests/engine_node/test_cleanup_units.py fails when the two drift apart.
DEFAULTS = {"fragmentation_threshold": 0.35, "interval_s": 0, "cooldown_s": 300, "max_duration_s": 60}
CHECK_PERIOD_S = 2.0
# On vLLM, the allocator's state changes only when the engine works: while no request has started since the last
# reading and the node has stayed online, the check reuses that reading, reading again after this long at most.
# Each read is a workers' call, and vLLM's multiprocess executor (tensor parallelism, and every engine of the CPU
# build) spins a worker on a core for a second after each call it answers: read every 2 s, an idle engine kept half
# a core busy.
SETTLED_REREAD_S = 30.0
# An unanswered or refused lease request is asked again after this long.
REQUEST_RETRY_S = 5.0
# A cleanup command arriving this soon after our own request is taken to be its grant (for the trigger label).
GRANT_WINDOW_S = 30.0
RESET_ATTEMPTS = 10
RESET_RETRY_S = 0.2
# The agent's own waits (the engine is never given a timeout: engine_node/fragmentation.py).
CALL_TIMEOUT_S = 10.0
# The readings recorded with a cleanup: on a CPU-only host generating two long replies, vLLM's /metrics has taken
# over 5 s to answer. Before and after together stay inside the 30 s the control plane's lease adds to
# max_duration_s.
READ_TIMEOUT_S = 12.0

Progress = Callable[[str, str], Awaitable[None]]


class CleanupFailed(Exception):
    """A step failed; the gate is reopened and the command reports this message."""


def cleanup_params(content: dict | None) -> dict:
    """The `cleanup` section of the applied parameters over the defaults (an older control plane sends none)."""
    section = (content or {}).get("cleanup")
    return {**DEFAULTS, **(section if isinstance(section, dict) else {})}


def _figures(reading: dict | None) -> dict | None:
    if reading is None:
        return None
    keys = (
        "fragmentation",
        "kv_cache_usage",
        "device",
        "reserved_bytes",
        "allocated_bytes",
        "inactive_split_bytes",
        "kv_cache_bytes",
        "workspace_reserved_bytes",
        "workspace_free_bytes",
    )
    figures = {key: reading.get(key) for key in keys}
    if reading.get("error"):
        figures["error"] = reading["error"]
    return figures


def _gauge(value) -> float:
    return float(value) if isinstance(value, int | float) else math.nan


class MemoryCleanup:
    """Runs cleanups against the engine and decides when an automatic one is due."""

    def __init__(self, *, engine_url: Callable[[], str], backend: str, admission: Admission, drain_timeout_s: float):
        self.engine_url = engine_url
        self.backend = backend
        self.admission = admission
        self.drain_timeout_s = drain_timeout_s
        self.last_reading: dict | None = None
        self.last_read_at: float | None = None  # monotonic; the sample shows last_reading while it is fresh
        # The admissions counted when the last reading was taken with nothing in flight, until the node's status
        # changes (unsettle): the reading holds while that count stays the same (settled).
        self._settled_at_count: int | None = None
        # The workers' devices of the last reading that had them: the GPUs the engine runs on (telemetry/gpu.py).
        self.last_workers: list[dict] | None = None
        self.last_result: dict | None = None
        self._last_finished = time.monotonic()
        self._requested_at: float | None = None
        self._requested_trigger = ""
        self._session: aiohttp.ClientSession | None = None
        # At most one workers' call of each method outstanding, however long a step keeps the engine busy.
        self.calls = WorkerCalls(self._http)

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
        return self._session

    async def close(self) -> None:
        await self.calls.close()
        if self._session is not None:
            await self._session.close()

    async def read(self, timeout_s: float = RPC_TIMEOUT_S) -> dict | None:
        """The engine's memory figures now (also kept as last_reading)."""
        count = self.admission.admitted_total if self.admission.in_flight == 0 else None
        self.last_reading = await read_fragmentation(
            self._http(), self.engine_url(), self.backend, timeout_s, calls=self.calls
        )
        self.last_read_at = time.monotonic()
        quiet = self.backend == "vllm" and self.last_reading is not None and self.admission.in_flight == 0
        self._settled_at_count = count if quiet and count == self.admission.admitted_total else None
        workers = (self.last_reading or {}).get("per_worker")
        if workers and any(w.get("device_uuid") for w in workers):
            self.last_workers = workers
        return self.last_reading

    def settled(self) -> bool:
        """Whether the last reading still describes the engine: on vLLM, taken with nothing in flight, no request
        started since, and the node's status unchanged (a drain, a cleanup or a restart unsettles it)."""
        return (
            self._settled_at_count is not None
            and self.admission.in_flight == 0
            and self.admission.admitted_total == self._settled_at_count
        )

    def unsettle(self) -> None:
        self._settled_at_count = None

    async def check_reading(self) -> dict | None:
        """The reading the automatic check decides on: the last one while it is settled (and under
        SETTLED_REREAD_S old), else a new one."""
        if self.settled() and time.monotonic() - self.last_read_at < SETTLED_REREAD_S:
            return self.last_reading
        return await self.read()

    def fragmentation_figure(self) -> tuple[float | None, str | None]:
        """The sample's fragmentation from the last reading while it is fresh or settled, else None and why."""
        return fragmentation_figure(self.last_reading, self.last_read_at, time.monotonic(), settled=self.settled())

    def due(self, params: dict, reading: dict | None, now: float | None = None) -> str | None:
        """The trigger ("threshold" or "timer") of an automatic cleanup due now, else None."""
        now = time.monotonic() if now is None else now
        if self._requested_at is not None and now - self._requested_at < REQUEST_RETRY_S:
            return None
        since = now - self._last_finished
        fragmentation = reading.get("fragmentation") if reading else None
        if (
            isinstance(fragmentation, int | float)
            and fragmentation > params["fragmentation_threshold"]
            and since >= params["cooldown_s"]
        ):
            return "threshold"
        if params["interval_s"] and since >= params["interval_s"]:
            return "timer"
        return None

    def requested(self, trigger: str) -> None:
        self._requested_at = time.monotonic()
        self._requested_trigger = trigger

    def denied(self, reason: str) -> None:
        log.info("cleanup lease refused: %s", reason)

    def take_trigger(self) -> str:
        """What started the cleanup command that just arrived: our own request's trigger, or an operator."""
        if self._requested_at is not None and time.monotonic() - self._requested_at < GRANT_WINDOW_S:
            trigger = self._requested_trigger
        else:
            trigger = "operator"
        self._requested_at = None
        return trigger

    async def run(
        self, *, trigger: str, params: dict, progress: Progress, reopen: Callable[[], None]
    ) -> tuple[bool, dict]:
        """One cleanup; returns (succeeded, result). The gate is always reopened through `reopen` at the end."""
        max_duration_s = float(params["max_duration_s"])
        started_at = time.time()
        result: dict = {"trigger": trigger, "started_at": round(started_at, 3), "max_duration_s": max_duration_s}
        before = await self._read_quietly()
        ok, error, after = False, "", None
        closed_at = time.monotonic()
        try:
            # Everything while the gate is closed, the reading after included, counts against the bound.
            async with asyncio.timeout(max_duration_s):
                await progress("running", "draining: in-flight requests finish, new ones wait")
                result["in_flight_at_drain"] = self.admission.in_flight
                done, waited = await self.admission.drain(min(self.drain_timeout_s, max_duration_s))
                result["drained_s"] = round(waited, 3)
                if not done:
                    raise CleanupFailed(
                        f"{self.admission.in_flight} requests still running after {waited:.1f}s: nothing was reset "
                        "(an admitted request is never dropped)"
                    )
                await progress("running", "resetting the prefix cache")
                await self._reset_prefix_cache()
                result["prefix_cache_reset"] = True
                await progress("running", "releasing cached allocator blocks")
                result["released"] = await self._release()
                after = await self._read_quietly()
                ok = True
        except TimeoutError:
            error = f"did not finish within cleanup.max_duration_s ({max_duration_s:g}s)"
        except (CleanupFailed, EngineCallFailed) as exc:
            error = str(exc)
        except Exception as exc:  # the command must end with a result whatever went wrong
            log.exception("memory cleanup failed unexpectedly")
            error = f"unexpected error: {exc!r}"
        finally:
            held_s = time.monotonic() - closed_at
            reopen()
        if not ok:
            after = await self._read_quietly()
            result["error"] = error[:500]
        result.update(
            before=_figures(before),
            after=_figures(after),
            duration_s=round(held_s, 3),
            finished_at=round(time.time(), 3),
        )
        self._last_finished = time.monotonic()
        self.last_result = result
        outcome = "succeeded" if ok else "failed"
        metrics.CLEANUPS.labels(trigger=trigger, result=outcome).inc()
        metrics.CLEANUP_SECONDS.observe(held_s)
        for phase, figures in (("before", before), ("after", after)):
            metrics.CLEANUP_FRAGMENTATION.labels(phase=phase).set(_gauge((figures or {}).get("fragmentation")))
            metrics.CLEANUP_KV_USAGE.labels(phase=phase).set(_gauge((figures or {}).get("kv_cache_usage")))
        log.info("memory cleanup (%s) %s in %.2fs: %s", trigger, outcome, held_s, json.dumps(result))
        return ok, result

    async def _read_quietly(self) -> dict | None:
        """The figures recorded with a cleanup: a loaded engine gets longer to answer than the periodic check, and
        the whole reading is bounded (the control plane's lease allows max_duration_s plus 30 s)."""
        try:
            return await asyncio.wait_for(self.read(READ_TIMEOUT_S), READ_TIMEOUT_S + 1)
        except (TimeoutError, aiohttp.ClientError, EngineCallFailed):
            return None
        except Exception:  # a figure is recorded as absent; the cleanup itself must still run and end
            log.exception("reading the engine's memory figures for a cleanup failed")
            return None

    async def _reset_prefix_cache(self) -> None:
        """POST /reset_prefix_cache; vLLM answers {"success": false} while any block is held (a liveness probe
        can be running even on a drained node), so it is retried briefly."""
        url = f"{self.engine_url()}/reset_prefix_cache"
        for attempt in range(RESET_ATTEMPTS):
            try:
                async with self._http().post(url, timeout=aiohttp.ClientTimeout(total=CALL_TIMEOUT_S)) as response:
                    text = await response.text()
            except (aiohttp.ClientError, TimeoutError) as exc:
                raise CleanupFailed(f"reset_prefix_cache: {exc!r}") from exc
            if response.status != 200:
                raise CleanupFailed(f"reset_prefix_cache: HTTP {response.status}: {text[:200]}")
            try:
                answer = json.loads(text) if text.strip() else {}
            except ValueError:
                answer = {}
            # The simulator answers an empty 200; vLLM 0.32 answers {"success": bool}.
            if not isinstance(answer, dict) or answer.get("success", True):
                return
            if attempt + 1 < RESET_ATTEMPTS:
                await asyncio.sleep(RESET_RETRY_S)
        raise CleanupFailed("reset_prefix_cache: the engine still holds blocks (success false)")

    async def _release(self) -> dict:
        workers = await self.calls.call(self.engine_url(), RELEASE_METHOD, CALL_TIMEOUT_S)
        errors = [str(w["error"]) for w in workers if w.get("error")]
        if errors:
            raise CleanupFailed(f"{RELEASE_METHOD}: {errors[0][:300]}")
        released: dict = {"workers": len(workers)}
        for key in ("released_bytes", "released_blocks"):
            values = [w[key] for w in workers if isinstance(w.get(key), int)]
            if values:
                released[key] = sum(values)
        return released
