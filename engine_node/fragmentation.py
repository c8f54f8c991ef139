"""Memory fragmentation of the engine, read inside its workers, with the KV-cache block usage beside it.

Both backends answer the same dev-mode call, `POST /collective_rpc {"method": "fragmentation_stats"}`: on vLLM
the agent's worker extension (engine_node/vllm_worker/engine_node_worker.py) reads the CUDA caching allocator
in every worker; the simulator answers from its block-pool model (labelled simulated). KV-cache usage comes from
the engine's own `vllm:kv_cache_usage_perc` gauge (a 0..1 fraction despite the name).

fragmentation = inactive_split_bytes / reserved_bytes, the largest over the workers: memory the allocator holds
in free pieces of segments that still contain live tensors. It is the part of reserved memory that neither
serves a new tensor larger than the piece nor goes back with empty_cache(), the waste behind the seed's OOMs
under dynamic batching. (reserved - allocated) / reserved is also returned on CUDA as `cached_free_ratio`, but
it counts whole cached segments too, which any tensor that fits can reuse, so it is not the trigger. On the CPU
build there is no caching allocator: fragmentation is None, never an invented number.
"""

import asyncio
import logging
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
RPC_TIMEOUT_S = 2.0
_BYTES = ("reserved_bytes", "allocated_bytes", "inactive_split_bytes")


class EngineCallFailed(Exception):
    """A dev-mode call to the engine failed or answered something unusable."""


async def collective_rpc(
    http: aiohttp.ClientSession, engine_url: str, method: str, timeout_s: float = RPC_TIMEOUT_S
) -> list[dict]:
    """Call `method` on every worker; one result dict per worker. Raises EngineCallFailed."""
    # vLLM bounds the call inside the engine with `timeout` as well, so a slow worker cannot hold the RPC open.
    body = {"method": method, "timeout": timeout_s}
    try:
        async with http.post(
            f"{engine_url}/collective_rpc", json=body, timeout=aiohttp.ClientTimeout(total=timeout_s + 1)
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
    """One node's figures from the workers' results: byte counts summed, fragmentation the worst worker's."""
    ratios = [w["fragmentation"] for w in workers if isinstance(w.get("fragmentation"), int | float)]
    summary: dict = {
        "fragmentation": max(ratios) if ratios else None,
        "device": "simulated" if backend == "simulator" else next((w.get("device") for w in workers), None),
        "workers": len(workers),
    }
    for key in _BYTES:
        values = [w[key] for w in workers if isinstance(w.get(key), int)]
        summary[key] = sum(values) if values else None
    errors = [str(w["error"]) for w in workers if w.get("error")]
    if errors:
        summary["error"] = errors[0][:300]
    return summary


async def read_fragmentation(
    http: aiohttp.ClientSession, engine_url: str, backend: str, timeout_s: float = RPC_TIMEOUT_S
) -> dict | None:
    """The engine's memory figures now, or None when the engine answers neither call (restarting, wedged).

    Keys: fragmentation (0..1, or None without allocator statistics, e.g. the vLLM CPU build), kv_cache_usage
    (0..1 or None), device ("cuda", "cpu" or "simulated"), workers, reserved_bytes, allocated_bytes,
    inactive_split_bytes (int or None), and error when the workers' call failed. Plain JSON types only.
    `backend` is the agent's ("vllm" or "simulator"); on vLLM the engine must run the worker extension, which
    the agent always gives it. `timeout_s` bounds each of the two calls (a busy CPU-only host may need more).
    """
    stats, usage = await asyncio.gather(
        collective_rpc(http, engine_url, STATS_METHOD, timeout_s),
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
