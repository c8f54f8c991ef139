"""The device half of scripts/gpu_check.py, run in the engine's interpreter (the one with PyTorch and vLLM).

    python scripts/gpu_check_device.py probe       # {"cuda": bool, "devices": [...], "torch": ...}
    python scripts/gpu_check_device.py check       # the allocator, memory and NVML checks below

`check` runs the agent's worker extension (engine_node/vllm_worker/engine_node_worker.py) against a stand-in worker
on cuda:0, without vLLM: a "KV cache" tensor the size vLLM would give it, then a workspace fragmented on purpose
(tensors in shared segments, every other one freed), and reads `fragmentation_stats` before and after: the figure
over memory that is not the KV cache must rise past the cleanup threshold while the old ratio over all reserved
memory stays low; `release_cached_blocks` must give memory back. It measures what the CUDA context leaves free on
each device (the largest gpu_memory_utilization vLLM accepts there) and reads NVML for each CUDA device by its UUID,
a MIG-enabled GPU included. Prints one JSON object; stdlib, PyTorch and (if installed) pynvml only.
"""

import contextlib
import importlib.util
import json
import sys
from pathlib import Path

EXTENSION = Path(__file__).resolve().parent.parent / "engine_node" / "vllm_worker" / "engine_node_worker.py"
MIB = 1 << 20
GIB = 1 << 30
# The KV cache's share of free memory in the stand-in (vLLM's would fill gpu_memory_utilization), at most 16 GiB.
KV_SHARE = 0.5
THRESHOLD = 0.35  # cleanup.fragmentation_threshold's default


def _extension():
    spec = importlib.util.spec_from_file_location("engine_node_worker", EXTENSION)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def probe() -> dict:
    try:
        import torch
    except ImportError:
        return {"cuda": False, "reason": "PyTorch is not installed in this interpreter"}
    if not torch.cuda.is_available():
        return {
            "cuda": False,
            "torch": torch.__version__,
            "reason": f"no CUDA device visible to PyTorch {torch.__version__}",
        }
    return {
        "cuda": True,
        "torch": torch.__version__,
        "devices": [{"index": i, "name": torch.cuda.get_device_name(i)} for i in range(torch.cuda.device_count())],
    }


def allocator(torch, module) -> dict:
    device = torch.device("cuda", 0)
    torch.cuda.empty_cache()
    free, _ = torch.cuda.mem_get_info(device)
    kv = torch.empty(min(int(free * KV_SHARE), 16 * GIB), dtype=torch.uint8, device=device)

    class Runner:
        kv_caches = [kv]

    class Worker(module.FragmentationWorkerExtension):
        rank = 0
        cache_config = None
        model_runner = Runner()

        def __init__(self):
            self.device = device

    worker = Worker()
    baseline = worker.fragmentation_stats()
    # 2 MiB tensors come from the allocator's 20 MiB "large" segments, several to a segment: freeing every other one
    # leaves holes inside segments that stay in use.
    tensors = [torch.empty(2 * MIB, dtype=torch.uint8, device=device) for _ in range(512)]
    torch.cuda.synchronize(device)
    for i in range(0, len(tensors), 2):
        tensors[i] = None
    fragmented = worker.fragmentation_stats()
    tensors.clear()
    torch.cuda.synchronize(device)
    freed = worker.fragmentation_stats()
    released = worker.release_cached_blocks()
    after = worker.fragmentation_stats()
    checks = {
        "cuda_branch": fragmented.get("device") == "cuda" and "error" not in fragmented,
        "kv_cache_found": (fragmented.get("kv_cache_reserved_bytes") or 0) >= kv.untyped_storage().nbytes(),
        "fragmentation_past_threshold": (fragmented.get("fragmentation") or 0) > THRESHOLD,
        "old_ratio_stays_low": (fragmented.get("inactive_split_of_reserved") or 1) < THRESHOLD,
        "device_uuid_read": str(fragmented.get("device_uuid") or "").startswith(("GPU-", "MIG-")),
        "empty_cache_released": (released.get("released_bytes") or 0) > 0,
        "reserved_fell": (after.get("reserved_bytes") or 0) < (freed.get("reserved_bytes") or 0),
    }
    del kv
    torch.cuda.empty_cache()
    return {
        "readings": {
            "baseline": baseline,
            "fragmented": fragmented,
            "all_freed": freed,
            "release": released,
            "after_release": after,
        },
        "checks": checks,
    }


def context_memory(torch) -> list[dict]:
    """What each device has free once a CUDA context is on it: vLLM refuses gpu_memory_utilization x total above it."""
    rows = []
    for index in range(torch.cuda.device_count()):
        torch.zeros(1, device=torch.device("cuda", index))
        free, total = torch.cuda.mem_get_info(index)
        rows.append({"index": index, "free_bytes": int(free), "total_bytes": int(total),
                     "largest_utilization": round(free / total, 4)})  # fmt: skip
    return rows


def nvml(torch, module) -> dict:
    """NVML per CUDA device, matched by UUID (CUDA's device 0 is not NVML's index 0 in general)."""
    try:
        import pynvml
    except ImportError:
        return {"available": False, "reason": "pynvml is not installed (pip install nvidia-ml-py to check NVML)"}
    pynvml.nvmlInit()
    try:
        by_uuid = {}
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            uuid = pynvml.nvmlDeviceGetUUID(handle)
            uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
            row = {"nvml_index": index, "uuid": uuid, "mig": False}
            with contextlib.suppress(pynvml.NVMLError):
                row["mig"] = pynvml.nvmlDeviceGetMigMode(handle)[0] == pynvml.NVML_DEVICE_MIG_ENABLE
            try:
                row["utilization_gpu"] = pynvml.nvmlDeviceGetUtilizationRates(handle).gpu / 100.0
            except pynvml.NVMLError as exc:  # NotSupported on a MIG-enabled GPU: a reason, not a failure
                row["utilization_gpu"] = None
                row["utilization_error"] = f"{type(exc).__name__}: {exc}"
            by_uuid[uuid] = row
        cuda = []
        for index in range(torch.cuda.device_count()):
            uuid = module._device_uuid(torch, torch.device("cuda", index))
            match = by_uuid.get(uuid)
            cuda.append({"cuda_index": index, "uuid": uuid, "nvml_index": match["nvml_index"] if match else None})
        mig_ok = all(r["utilization_gpu"] is not None or r["mig"] for r in by_uuid.values())
        return {"available": True, "nvml": list(by_uuid.values()), "cuda": cuda, "ok": mig_ok}
    finally:
        pynvml.nvmlShutdown()


def check() -> dict:
    import torch

    module = _extension()
    result = {**probe(), "allocator": allocator(torch, module), "context_memory": context_memory(torch)}
    result["nvml"] = nvml(torch, module)
    return result


def main() -> int:
    mode = sys.argv[1] if len(sys.argv) > 1 else "probe"
    try:
        result = probe() if mode == "probe" else check()
    except Exception as exc:
        result = {"cuda": True, "error": f"{type(exc).__name__}: {exc}"[:500]}
    print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
