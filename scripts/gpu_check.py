"""GPU check for a host with a CUDA device: the worker extension's CUDA branch and NVML, with PyTorch alone.

Runs the agent's vLLM worker extension (engine_node/vllm_worker/engine_node_worker.py) against a stand-in worker on
cuda:0, without vLLM: allocates tensors in shared segments and frees every other one, so the caching allocator
holds free pieces inside segments that still carry live tensors (fragmentation), reads `fragmentation_stats`
(inactive_split / reserved), frees the rest and calls `release_cached_blocks` (torch.cuda.empty_cache), and checks
that the figures move the right way. Then reads utilization.gpu through NVML (pynvml, if installed).

Prints one JSON object. Exit status: 0 every check passed; 1 a check failed; 2 no CUDA device (or no PyTorch).
Usage: python scripts/gpu_check.py   (any interpreter with torch; the vLLM one works).
"""

import importlib.util
import json
import sys
from pathlib import Path

NO_CUDA = 2
FAILED = 1
EXTENSION = Path(__file__).resolve().parent.parent / "engine_node" / "vllm_worker" / "engine_node_worker.py"
MIB = 1 << 20


def _extension():
    spec = importlib.util.spec_from_file_location("engine_node_worker", EXTENSION)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.FragmentationWorkerExtension


def _nvml() -> dict:
    try:
        import pynvml
    except ImportError:
        return {"available": False, "reason": "pynvml is not installed (pip install nvidia-ml-py to check NVML)"}
    try:
        pynvml.nvmlInit()
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(0)
            rates = pynvml.nvmlDeviceGetUtilizationRates(handle)
            return {
                "available": True,
                "utilization_gpu": rates.gpu / 100.0,
                "note": "utilization.gpu is the share of time a kernel ran, not SM activity (DCGM's SM_ACTIVE)",
            }
        finally:
            pynvml.nvmlShutdown()
    except Exception as exc:
        return {"available": True, "ok": False, "error": f"{type(exc).__name__}: {exc}"[:300]}


def check(torch) -> dict:
    device = torch.device("cuda", 0)
    extension = _extension()

    class Worker(extension):
        """What the extension reads of vLLM's worker: its device, rank and cache config."""

        rank = 0
        cache_config = None

        def __init__(self):
            self.device = device

    worker = Worker()
    checks: dict[str, bool] = {}
    torch.cuda.empty_cache()
    baseline = worker.fragmentation_stats()
    # 2 MiB tensors come from the allocator's 20 MiB "large" segments, several to a segment: freeing every other
    # one leaves holes inside segments that stay in use.
    tensors = [torch.empty(2 * MIB, dtype=torch.uint8, device=device) for _ in range(64)]
    torch.cuda.synchronize(device)
    for i in range(0, len(tensors), 2):
        tensors[i] = None
    fragmented = worker.fragmentation_stats()
    tensors.clear()
    torch.cuda.synchronize(device)
    freed = worker.fragmentation_stats()
    released = worker.release_cached_blocks()
    after = worker.fragmentation_stats()

    checks["cuda_branch"] = fragmented.get("device") == "cuda" and "error" not in fragmented
    checks["fragmentation_rose"] = (fragmented.get("fragmentation") or 0) > (baseline.get("fragmentation") or 0)
    checks["inactive_split_seen"] = (fragmented.get("inactive_split_bytes") or 0) > 0
    checks["reserved_held_before_release"] = (freed.get("reserved_bytes") or 0) > 0
    checks["empty_cache_released"] = (released.get("released_bytes") or 0) > 0
    checks["reserved_fell"] = (after.get("reserved_bytes") or 0) < (freed.get("reserved_bytes") or 0)
    checks["fragmentation_back_down"] = (after.get("fragmentation") or 0) <= (fragmented.get("fragmentation") or 0)
    nvml = _nvml()
    if nvml.get("available"):
        checks["nvml_read"] = nvml.get("ok", True)
    return {
        "cuda": True,
        "device": torch.cuda.get_device_name(device),
        "torch": torch.__version__,
        "readings": {
            "baseline": baseline,
            "fragmented": fragmented,
            "all_freed": freed,
            "release": released,
            "after_release": after,
        },
        "nvml": nvml,
        "checks": checks,
        "ok": all(checks.values()),
    }


def main() -> int:
    try:
        import torch
    except ImportError:
        print(json.dumps({"cuda": False, "ok": None, "reason": "PyTorch is not installed in this interpreter"}))
        return NO_CUDA
    if not torch.cuda.is_available():
        reason = f"no CUDA device visible to PyTorch {torch.__version__}"
        print(json.dumps({"cuda": False, "ok": None, "torch": torch.__version__, "reason": reason}))
        return NO_CUDA
    try:
        result = check(torch)
    except Exception as exc:
        result = {"cuda": True, "ok": False, "error": f"{type(exc).__name__}: {exc}"[:500]}
    print(json.dumps(result, sort_keys=True))
    return 0 if result["ok"] else FAILED


if __name__ == "__main__":
    sys.exit(main())
