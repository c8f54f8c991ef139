"""The fragmentation figure on vLLM: free pieces inside segments, over the memory that is not the KV cache.

vLLM allocates its whole KV cache through the caching allocator, sized to fill gpu_memory_utilization of the GPU,
so `inactive_split_bytes / reserved_bytes` divides the activation workspace's holes by ~the whole GPU and stays in
the low percents: the 35 % cleanup threshold and the 20 %/35 % alerts could never fire. The worker extension's
`workspace_figures` takes the KV cache's segments out. The segments here are in the format of
`torch.cuda.memory_snapshot()` (torch.cuda.memory._snapshot documents it), shaped like an H200 worker serving a 7B
model; PyTorch's own `torch.cuda._memory_viz.segsum` checks their accounting in the vLLM environment's PyTorch, and
the KV cache is found through real tensors' storages there.
"""

import importlib.util
import json
import os
import subprocess

import pytest

from engine_node.cleanup import DEFAULTS, MemoryCleanup
from engine_node.fragmentation import summarise
from tests.engine_node.conftest import ROOT, VLLM_ENV

GIB = 1 << 30
MIB = 1 << 20
EXTENSION = ROOT / "engine_node" / "vllm_worker" / "engine_node_worker.py"


def extension():
    spec = importlib.util.spec_from_file_location("engine_node_worker", EXTENSION)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Snapshot:
    """Segments laid out one after another on device 0, as the caching allocator's snapshot lists them."""

    def __init__(self):
        self.segments: list[dict] = []
        self.address = 0x7F0000000000

    def segment(self, *blocks: tuple[int, str], segment_type: str = "large") -> int:
        """A segment made of (size, state) blocks; returns its address."""
        start = self.address
        records, offset = [], 0
        for size, state in blocks:
            records.append(
                {"size": size, "requested_size": size, "address": start + offset, "state": state, "frames": []}
            )
            offset += size
        active = sum(size for size, state in blocks if state != "inactive")
        self.segments.append(
            {
                "device": 0,
                "address": start,
                "total_size": offset,
                "stream": 0,
                "segment_type": segment_type,
                "segment_pool_id": (0, 0),
                "allocated_size": sum(size for size, state in blocks if state == "active_allocated"),
                "active_size": active,
                "blocks": records,
            }
        )
        self.address += offset + 2 * MIB
        return start


def h200_worker(workspace_holes: int) -> tuple[Snapshot, list[tuple[int, int]]]:
    """A 7B model on an H200: 28 layers of KV cache (3.9 GiB each, a 1 MiB rounding remainder free in each segment),
    14 GiB of weights, a 10 GiB activation workspace with `workspace_holes` free inside segments that still hold
    live tensors, and one cached segment with nothing in it."""
    snap = Snapshot()
    kv = []
    for _ in range(28):
        size = 3994 * MIB
        kv.append((snap.segment((size, "active_allocated"), (MIB, "inactive")), size))
    for _ in range(14):
        snap.segment((GIB, "active_allocated"))
    hole_per_segment = workspace_holes // 10
    for _ in range(10):
        snap.segment((GIB - hole_per_segment, "active_allocated"), (hole_per_segment, "inactive"))
    snap.segment((GIB, "inactive"))  # cached whole: any tensor that fits reuses it, empty_cache() returns it
    return snap, kv


def old_ratio(snap: Snapshot) -> float:
    """inactive_split_bytes / reserved_bytes as torch.cuda.memory_stats() counts them: free blocks of split segments."""
    reserved = sum(s["total_size"] for s in snap.segments)
    split_free = sum(
        b["size"] for s in snap.segments if len(s["blocks"]) > 1 for b in s["blocks"] if b["state"] == "inactive"
    )
    return split_free / reserved


def test_the_kv_cache_no_longer_hides_a_fragmented_workspace():
    figures = extension().workspace_figures
    fragmented, kv = h200_worker(workspace_holes=9 * GIB)
    tidy, _ = h200_worker(workspace_holes=GIB)

    bad, good = figures(fragmented.segments, kv, 0), figures(tidy.segments, kv, 0)
    assert bad["kv_cache_reserved_bytes"] == 28 * (3994 + 1) * MIB
    assert bad["workspace_reserved_bytes"] == 25 * GIB  # weights + activations + the cached segment
    assert bad["workspace_free_bytes"] == 10 * (9 * GIB // 10)  # not the KV remainders, not the cached segment
    assert bad["fragmentation"] == pytest.approx(0.36, abs=0.001)
    assert good["fragmentation"] == pytest.approx(0.04, abs=0.001)
    # The figure the threshold read before: 9 GiB of holes in a 10 GiB workspace came out at 7 %.
    assert old_ratio(fragmented) < 0.07

    cleanup = MemoryCleanup(engine_url=lambda: "", backend="vllm", admission=None, drain_timeout_s=1)
    cooled = {**DEFAULTS, "cooldown_s": 0}
    assert cleanup.due(cooled, summarise([{"device": "cuda", **bad}], "vllm")) == "threshold"
    assert cleanup.due(cooled, summarise([{"device": "cuda", **good}], "vllm")) is None
    assert cleanup.due(cooled, {"fragmentation": old_ratio(fragmented)}) is None  # why it never fired


def test_only_the_workers_device_and_only_pieces_beside_live_tensors_count():
    figures = extension().workspace_figures
    snap = Snapshot()
    snap.segment((GIB, "inactive"))  # cached, empty
    snap.segment((MIB, "active_awaiting_free"), (MIB, "inactive"), segment_type="small")  # a live block pending
    other = Snapshot()
    other.address = 0x7E0000000000
    other.segment((GIB, "active_allocated"), (GIB, "inactive"))
    for segment in other.segments:
        segment["device"] = 1
    result = figures(snap.segments + other.segments, [], 0)
    assert result["workspace_reserved_bytes"] == GIB + 2 * MIB
    assert result["workspace_free_bytes"] == MIB
    assert result["kv_cache_reserved_bytes"] == 0
    assert figures([], [], 0)["fragmentation"] == 0.0


TORCH_CHECK = r"""
import importlib.util, json, sys
import torch
from torch.cuda import _memory_viz

cases = json.loads(sys.stdin.read())
for case in cases:  # PyTorch's own accounting of a snapshot; it raises on a segment that does not add up
    _memory_viz.segsum({"segments": case["segments"]})

spec = importlib.util.spec_from_file_location("engine_node_worker", sys.argv[1])
ext = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ext)
raw = torch.zeros(4096, dtype=torch.int8)
k, v = raw[:2048].view(torch.float16), raw[2048:].view(torch.float16)  # two layers sharing one allocation
other = torch.zeros(512, dtype=torch.bfloat16)


class Runner:
    kv_caches = [k, v, [other]]


class Worker:
    model_runner = Runner()


ranges = ext.kv_cache_ranges(Worker())
print(json.dumps({
    "ranges": ranges,
    "expected": sorted([[raw.untyped_storage().data_ptr(), 4096], [other.untyped_storage().data_ptr(), 1024]]),
}))
"""


@pytest.mark.vllm
def test_pytorch_accepts_the_snapshots_and_the_kv_cache_is_found_through_tensor_storages(vllm_python):
    cases = [{"segments": h200_worker(holes)[0].segments} for holes in (9 * GIB, GIB)]
    result = subprocess.run(
        [str(vllm_python), "-c", TORCH_CHECK, str(EXTENSION)],
        input=json.dumps(cases),
        cwd=ROOT,
        env=dict(os.environ, **VLLM_ENV),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert [list(r) for r in found["ranges"]] == found["expected"]
