"""vLLM worker extension of the engine-node agent: allocator statistics and cache release inside vLLM's workers.

vLLM exposes no fragmentation metric or endpoint, so the agent starts vLLM with
`--worker-extension-cls engine_node_worker.FragmentationWorkerExtension` and calls these methods through the
dev-mode `POST /collective_rpc`. vLLM mixes the class into its worker class (every attribute here must be new to
the worker, which vLLM asserts), so module-level helpers do the work and the class only names the two calls.

This file runs inside vLLM's own interpreter, which need not have the agent installed: the agent puts this
directory (and nothing else) on the engine's PYTHONPATH, and the module imports nothing from `engine_node`.
Results are plain JSON types only (dict, str, int, float, bool, None): collective_rpc results travel from the
engine core to the API server as msgpack, and a non-serialisable result wedged the engine in our trials.
Nothing here raises: an error comes back as `{"error": ...}` instead of an exception in the engine core.

`fragmentation_stats` answers, per worker: its rank and device (CUDA ordinal and UUID, so the agent reads NVML for
the GPU this worker really uses), the KV cache's bytes (found through vLLM's `model_runner.kv_caches`), the
allocator's raw counters, and `fragmentation` over the memory that is not the KV cache (`workspace_figures`; the
definition is in docs/runbooks/memory-fragmentation.md), with `read_ms`, what the reading cost the worker.
"""

import contextlib
import gc
import time


def _request_amx_permission() -> None:
    """Ask Linux for the AMX tile-data permission in this worker before vLLM's CPU kernels use AMX.

    vLLM 0.32's CPU attention picks its AMX path for bfloat16 on CPUs that have AMX, and never asks the kernel for
    the XTILEDATA permission (arch_prctl ARCH_REQ_XCOMP_PERM) that Linux requires first: the worker dies with SIGILL
    at its first request. torch's `_init_amx` makes that request; it is a no-op where AMX is absent or granted.
    """
    # Never let this stop the engine from starting: a failed request leaves vLLM as it would have been.
    with contextlib.suppress(Exception):
        import torch

        init_amx = getattr(getattr(torch._C, "_cpu", None), "_init_amx", None)
        if init_amx is not None and not torch.cuda.is_available():
            init_amx()


_request_amx_permission()


class FragmentationWorkerExtension:
    """Mixed into vLLM's worker: `fragmentation_stats` and `release_cached_blocks` for collective_rpc."""

    def fragmentation_stats(self) -> dict:
        """Caching-allocator figures of this worker's device; on CPU, honest nulls (there is no such allocator)."""
        try:
            return _stats(self)
        except Exception as exc:  # never let an exception reach the engine core's RPC loop
            return {"error": f"{type(exc).__name__}: {exc}"[:300]}

    def release_cached_blocks(self) -> dict:
        """torch.cuda.empty_cache(): return cached, unoccupied allocator segments to the driver."""
        try:
            return _release(self)
        except Exception as exc:
            return {"error": f"{type(exc).__name__}: {exc}"[:300]}


def _cuda_device(worker):
    import torch

    device = getattr(worker, "device", None)
    if not torch.cuda.is_available() or not isinstance(device, torch.device) or device.type != "cuda":
        return None
    return device


def _plain_int(value) -> int | None:
    return None if value is None else int(value)


def _tensors(value):
    """Every tensor in vLLM's kv_caches (a list of tensors, or nested lists/tuples/dicts of them)."""
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list | tuple):
        for item in value:
            yield from _tensors(item)
    elif hasattr(value, "untyped_storage"):
        yield value


def kv_cache_ranges(worker) -> list[tuple[int, int]]:
    """(address, bytes) of each distinct storage behind the worker's KV cache (`model_runner.kv_caches`, which vLLM's
    GPU and CPU model runners both keep); layers that share one allocation count it once."""
    runner = getattr(worker, "model_runner", None)
    storages: dict[int, int] = {}
    for tensor in _tensors(getattr(runner, "kv_caches", None) or []):
        storage = tensor.untyped_storage()
        if storage.nbytes():
            storages[int(storage.data_ptr())] = int(storage.nbytes())
    return sorted(storages.items())


def workspace_figures(segments: list[dict], kv_ranges: list[tuple[int, int]], device_index: int | None = None) -> dict:
    """Fragmentation of the memory that is not the KV cache, from the caching allocator's segments.

    `segments` is `torch.cuda.memory_snapshot()`'s list (torch.cuda.memory._snapshot documents the format: each
    segment has address, total_size and blocks, each block a size and a state "active_allocated",
    "active_awaiting_free" or "inactive"). A segment that holds part of the KV cache is the KV cache's, whole: vLLM
    allocates the cache once at start-up, sized to fill gpu_memory_utilization, and never frees it. The rest is the
    workspace (weights, activations, CUDA-graph pools, cached free segments). Its free pieces are the inactive blocks
    of segments that still hold a live block: memory reserved that a tensor larger than the piece cannot use and
    empty_cache() cannot return. fragmentation = free pieces / workspace reserved."""
    kv_reserved = workspace_reserved = workspace_free = 0
    for segment in segments:
        if device_index is not None and segment.get("device", device_index) != device_index:
            continue
        start, size = int(segment["address"]), int(segment["total_size"])
        if any(kv_start < start + size and start < kv_start + kv_bytes for kv_start, kv_bytes in kv_ranges):
            kv_reserved += size
            continue
        workspace_reserved += size
        blocks = segment.get("blocks") or []
        if any(block["state"] != "inactive" for block in blocks):
            workspace_free += sum(int(block["size"]) for block in blocks if block["state"] == "inactive")
    return {
        "kv_cache_reserved_bytes": kv_reserved,
        "workspace_reserved_bytes": workspace_reserved,
        "workspace_free_bytes": workspace_free,
        "fragmentation": float(workspace_free / workspace_reserved) if workspace_reserved else 0.0,
    }


def _device_uuid(torch, device) -> str | None:
    """The device's UUID as NVML and nvidia-smi print it: "GPU-..." (a MIG instance's CUDA UUID is its own)."""
    uuid = getattr(torch.cuda.get_device_properties(device), "uuid", None)
    if uuid is None:
        return None
    text = str(uuid)
    return text if text.startswith(("GPU-", "MIG-")) else f"GPU-{text}"


def _segments(torch) -> list[dict]:
    """The caching allocator's segments, without allocation history: a walk of its segment list under its lock."""
    try:
        return torch.cuda.memory_snapshot(include_traces=False)
    except TypeError:  # a PyTorch without the include_traces argument
        return torch.cuda.memory_snapshot()


def _stats(worker) -> dict:
    import torch

    started = time.perf_counter()
    cache_config = getattr(worker, "cache_config", None)
    kv_ranges = kv_cache_ranges(worker)
    stats = {
        "rank": _plain_int(getattr(worker, "rank", None)),
        "kv_blocks": _plain_int(getattr(cache_config, "num_gpu_blocks", None)),
        "block_size": _plain_int(getattr(cache_config, "block_size", None)),
        "kv_cache_bytes": sum(size for _, size in kv_ranges),
    }
    device = _cuda_device(worker)
    if device is None:
        # The CPU backend allocates through the system allocator: no reserved/allocated/split figures exist.
        stats.update(
            device="cpu",
            reserved_bytes=None,
            allocated_bytes=None,
            inactive_split_bytes=None,
            workspace_reserved_bytes=None,
            workspace_free_bytes=None,
            fragmentation=None,
        )
        return stats
    memory = torch.cuda.memory_stats(device)
    reserved = int(memory.get("reserved_bytes.all.current", 0))
    allocated = int(memory.get("allocated_bytes.all.current", 0))
    inactive_split = int(memory.get("inactive_split_bytes.all.current", 0))
    segments = _segments(torch)
    free_bytes, total_bytes = torch.cuda.mem_get_info(device)
    index = int(device.index if device.index is not None else torch.cuda.current_device())
    stats.update(
        device="cuda",
        device_index=index,
        device_uuid=_device_uuid(torch, device),
        device_total_bytes=int(total_bytes),
        device_free_bytes=int(free_bytes),
        reserved_bytes=reserved,
        allocated_bytes=allocated,
        inactive_split_bytes=inactive_split,
        # Over all reserved memory, the KV cache included: the figure the threshold must not use (it stays near 0).
        inactive_split_of_reserved=float(inactive_split / reserved) if reserved else 0.0,
        num_alloc_retries=int(memory.get("num_alloc_retries", 0)),
        num_ooms=int(memory.get("num_ooms", 0)),
        **workspace_figures(segments, kv_ranges, index),
    )
    stats["read_ms"] = round((time.perf_counter() - started) * 1000, 3)
    return stats


def _release(worker) -> dict:
    import torch

    gc.collect()
    device = _cuda_device(worker)
    if device is None:
        return {"device": "cpu", "released_bytes": None}
    torch.cuda.synchronize(device)
    before = int(torch.cuda.memory_reserved(device))
    torch.cuda.empty_cache()
    return {"device": "cuda", "released_bytes": before - int(torch.cuda.memory_reserved(device))}
