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
"""

import contextlib
import gc


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


def _stats(worker) -> dict:
    import torch

    cache_config = getattr(worker, "cache_config", None)
    stats = {
        "rank": _plain_int(getattr(worker, "rank", None)),
        "kv_blocks": _plain_int(getattr(cache_config, "num_gpu_blocks", None)),
        "block_size": _plain_int(getattr(cache_config, "block_size", None)),
    }
    device = _cuda_device(worker)
    if device is None:
        # The CPU backend allocates through the system allocator: no reserved/allocated/split figures exist.
        stats.update(
            device="cpu",
            reserved_bytes=None,
            allocated_bytes=None,
            inactive_split_bytes=None,
            fragmentation=None,
        )
        return stats
    memory = torch.cuda.memory_stats(device)
    reserved = int(memory.get("reserved_bytes.all.current", 0))
    allocated = int(memory.get("allocated_bytes.all.current", 0))
    inactive_split = int(memory.get("inactive_split_bytes.all.current", 0))
    stats.update(
        device="cuda",
        reserved_bytes=reserved,
        allocated_bytes=allocated,
        inactive_split_bytes=inactive_split,
        # Free pieces of segments that still hold live tensors: neither usable for a larger tensor nor returnable
        # by empty_cache. (reserved - allocated) would also count whole cached segments, which are reusable.
        fragmentation=float(inactive_split / reserved) if reserved else 0.0,
        cached_free_ratio=float((reserved - allocated) / reserved) if reserved else 0.0,
        num_alloc_retries=int(memory.get("num_alloc_retries", 0)),
        num_ooms=int(memory.get("num_ooms", 0)),
    )
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
