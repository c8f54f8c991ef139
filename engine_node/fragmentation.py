"""Memory fragmentation of the engine, read inside its workers, with the KV-cache block usage beside it.

Both backends answer the same dev-mode call, `POST /collective_rpc {"method": "fragmentation_stats"}`: on vLLM
the agent's worker extension (engine_node/vllm_worker/engine_node_worker.py) reads the CUDA caching allocator
in every worker; the simulator answers from its block-pool model (labelled simulated). KV-cache usage comes from
the engine's own `vllm:kv_cache_usage_perc` gauge (a 0..1 fraction despite the name).

fragmentation = free pieces inside segments / reserved memory that is not the KV cache, the worst worker's
(docs/runbooks/memory-fragmentation.md has the definition): vLLM preallocates its KV cache through the caching
allocator, sized to fill `gpu_memory_utilization` of the GPU, so a ratio over all reserved memory divides the
activation workspace's holes by the whole GPU and never leaves the low percents. The worker extension takes the KV
cache's segments out of both sides. On the CPU build there is no caching allocator: fragmentation is None, never an
invented number.

The workers are called through `/collective_rpc` with no `timeout` in the body. vLLM's multiprocess executor
(tensor parallelism) takes that timeout as the deadline of its wait for the workers' replies; a call that times out
leaves the replies in the executor's response queue, the next model step reads a fragmentation dict instead of its
output, and the engine core dies with every request in flight. So the engine always waits for its workers, the agent
bounds only its own wait (`wait_s`), and `WorkerCalls` keeps at most one call of a method outstanding: a call the
agent stopped waiting for runs to its end inside the engine (vLLM drops the reply of a caller that left), and the next
read waits for that same call instead of queueing another behind a long step.
"""

import asyncio
import contextlib
import logging
from collections.abc import Callable
from pathlib import Path

import aiohttp

log = logging.getLogger("engine_node.fragmentation")

STATS_METHOD = "fragmentation_stats"
RELEASE_METHOD = "release_cached_blocks"
# Given to vLLM as --worker-extension-cls; the module lives alone in WORKER_EXTENSION_DIR, which the agent puts on
# the engine's PYTHONPATH (the vLLM interpreter need not have engine_node installed, and nothing else may shadow
# vLLM's own modules).
WORKER_EXTENSION = "engine_node_worker.FragmentationWorkerExtension"
WORKER_EXTENSION_DIR = Path(__file__).resolve().parent / "vllm_worker"
KV_USAGE = "vllm:kv_cache_usage_perc"
# How long the agent waits for the workers' answer to one periodic read; the engine itself never gives up on it.
RPC_TIMEOUT_S = 2.0
# The longest a call the agent stopped waiting for is kept open before its connection is dropped (a wedged engine
# is the liveness probe's to restart, engine_node/engine.py).
OUTSTANDING_CAP_S = 600.0
_BYTES = (
    "reserved_bytes",
    "allocated_bytes",
    "inactive_split_bytes",
    "kv_cache_bytes",
    "workspace_reserved_bytes",
    "workspace_free_bytes",
)
# What the summary keeps of each worker: its device (the GPU figures follow it) and its own figures.
_PER_WORKER = (
    "rank",
    "device",
    "device_index",
    "device_uuid",
    "device_total_bytes",
    "device_free_bytes",
    "fragmentation",
    "kv_cache_bytes",
    "workspace_reserved_bytes",
    "workspace_free_bytes",
    "read_ms",
)


class EngineCallFailed(Exception):
    """A dev-mode call to the engine failed or answered something unusable."""


async def collective_rpc(
    http: aiohttp.ClientSession, engine_url: str, method: str, timeout_s: float = RPC_TIMEOUT_S
) -> list[dict]:
    """Call `method` on every worker; one result dict per worker. Raises EngineCallFailed.

    `timeout_s` bounds the agent's wait only: the body carries no `timeout` (see the module)."""
    try:
        async with http.post(
            f"{engine_url}/collective_rpc", json={"method": method}, timeout=aiohttp.ClientTimeout(total=timeout_s)
        ) as response:
            if response.status != 200:
                detail = (await response.text())[:200]
                raise EngineCallFailed(f"collective_rpc {method}: HTTP {response.status}: {detail}")
            document = await response.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        raise EngineCallFailed(f"collective_rpc {method}: {exc!r}") from exc
    results = document.get("results") if isinstance(document, dict) else None
    if not isinstance(results, list):
        raise EngineCallFailed(f"collective_rpc {method}: no results in the answer")
    return [r for r in results if isinstance(r, dict)]


class WorkerCalls:
    """At most one outstanding `/collective_rpc` per engine and method; the caller bounds only its own wait."""

    def __init__(self, http: Callable[[], aiohttp.ClientSession]):
        self._http = http
        self._outstanding: dict[tuple[str, str], asyncio.Task] = {}

    async def call(self, engine_url: str, method: str, wait_s: float) -> list[dict]:
        """The workers' results of `method`; raises EngineCallFailed when they do not come within `wait_s` (the
        call stays outstanding and the next `call` waits for it) or the call failed."""
        key = (engine_url, method)
        task = self._outstanding.get(key)
        if task is None or task.done():
            task = asyncio.create_task(collective_rpc(self._http(), engine_url, method, OUTSTANDING_CAP_S))
            self._outstanding[key] = task
        done, _ = await asyncio.wait({task}, timeout=wait_s)
        if not done:
            raise EngineCallFailed(
                f"collective_rpc {method}: no answer within {wait_s:g}s (a long engine step, or a busy engine); the "
                "call stays outstanding inside the engine and the next read waits for it"
            )
        # Two callers can wait on one call (the periodic check's and a cleanup's reading): the first to wake forgets it.
        if self._outstanding.get(key) is task:
            del self._outstanding[key]
        return task.result()

    def outstanding(self) -> list[str]:
        return [method for (_, method), task in self._outstanding.items() if not task.done()]

    async def close(self) -> None:
        tasks = list(self._outstanding.values())
        self._outstanding.clear()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, EngineCallFailed):
                await task


async def kv_cache_usage(
    http: aiohttp.ClientSession, engine_url: str, timeout_s: float = RPC_TIMEOUT_S
) -> float | None:
    """The engine's KV-cache block usage, 0..1 (the mean over its engines), or None when it cannot be read."""
    try:
        async with http.get(f"{engine_url}/metrics", timeout=aiohttp.ClientTimeout(total=timeout_s)) as response:
            if response.status != 200:
                return None
            text = await response.text()
    except (aiohttp.ClientError, TimeoutError):
        return None
    values = []
    for line in text.splitlines():
        if line.startswith(KV_USAGE + "{") or line.startswith(KV_USAGE + " "):
            try:
                values.append(float(line.rsplit(" ", 1)[1]))
            except ValueError:
                continue
    return sum(values) / len(values) if values else None


def summarise(workers: list[dict], backend: str) -> dict:
    """One node's figures from the workers' results: byte counts summed, fragmentation the worst worker's, and each
    worker's own figures and device under `per_worker`."""
    ratios = [w["fragmentation"] for w in workers if isinstance(w.get("fragmentation"), int | float)]
    summary: dict = {
        "fragmentation": max(ratios) if ratios else None,
        "device": "simulated" if backend == "simulator" else next((w.get("device") for w in workers), None),
        "workers": len(workers),
    }
    for key in _BYTES:
        values = [w[key] for w in workers if isinstance(w.get(key), int)]
        summary[key] = sum(values) if values else None
    summary["per_worker"] = [{key: w.get(key) for key in _PER_WORKER if key in w} for w in workers]
    errors = [str(w["error"]) for w in workers if w.get("error")]
    if errors:
        summary["error"] = errors[0][:300]
    return summary


async def read_fragmentation(
    http: aiohttp.ClientSession,
    engine_url: str,
    backend: str,
    timeout_s: float = RPC_TIMEOUT_S,
    *,
    calls: WorkerCalls | None = None,
) -> dict | None:
    """The engine's memory figures now, or None when the engine answers neither call (restarting, wedged).

    Keys: fragmentation (0..1, or None without allocator statistics, e.g. the vLLM CPU build), kv_cache_usage
    (0..1 or None), device ("cuda", "cpu" or "simulated"), workers, reserved_bytes, allocated_bytes,
    inactive_split_bytes, kv_cache_bytes, workspace_reserved_bytes, workspace_free_bytes (int or None),
    per_worker (each worker's device and figures), and error when the workers' call failed. Plain JSON types only.
    `backend` is the agent's ("vllm" or "simulator"); on vLLM the engine must run the worker extension, which
    the agent always gives it. `timeout_s` bounds the agent's wait for each of the two calls (a busy CPU-only host
    may need more); with `calls`, a workers' call it stopped waiting for stays the one outstanding call.
    """
    workers = (
        calls.call(engine_url, STATS_METHOD, timeout_s)
        if calls is not None
        else collective_rpc(http, engine_url, STATS_METHOD, timeout_s)
    )
    stats, usage = await asyncio.gather(
        workers,
        kv_cache_usage(http, engine_url, timeout_s),
        return_exceptions=True,
    )
    if isinstance(usage, BaseException):
        usage = None
    if isinstance(stats, EngineCallFailed):
        if usage is None:
            return None
        summary = summarise([], backend)
        summary["error"] = str(stats)[:300]
    elif isinstance(stats, BaseException):
        raise stats
    else:
        summary = summarise(stats, backend)
    summary["kv_cache_usage"] = usage
    return summary
