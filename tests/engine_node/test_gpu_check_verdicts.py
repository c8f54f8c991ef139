"""scripts/gpu_check.py's verdict per point, from what its device check and agent runs found.

The readings are in the shapes the script collects on a GPU host (scripts/gpu_check_device.py's JSON, the agent's
/healthz); a CPU rehearsal of the whole script (`--rehearse-on-cpu`, docs/gpu.md) produced the agent-run shapes.
Each way a GPU path can fail must turn its point's verdict to "fail", and nothing else's."""

import copy
import importlib.util

import pytest

from tests.engine_node.conftest import ROOT

UUIDS = ["GPU-aaaa", "GPU-bbbb", "GPU-cccc"]


def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "scripts" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def device() -> dict:
    checks = ["cuda_branch", "kv_cache_found", "fragmentation_past_threshold", "old_ratio_stays_low",
              "device_uuid_read", "empty_cache_released", "reserved_fell"]  # fmt: skip
    return {
        "allocator": {"checks": dict.fromkeys(checks, True)},
        "context_memory": [
            {"index": i, "free_bytes": 140 << 30, "total_bytes": 141 << 30, "largest_utilization": 0.993}
            for i in range(3)
        ],
        # CUDA's order is not NVML's on this host: CUDA device 0 is NVML's GPU 2.
        "nvml": {"available": True, "ok": True, "nvml": [{"nvml_index": i, "uuid": u, "mig": False,
                                                          "utilization_gpu": 0.0} for i, u in enumerate(UUIDS)]},
    }  # fmt: skip


def runs() -> list[dict]:
    worker = {"device": "cuda", "fragmentation": 0.02, "read_ms": 1.7, "kv_cache_bytes": 120 << 30}
    main = {
        "tensor_parallel": 2,
        "pinned": None,
        "start_s": 74.2,
        "load": {"requests": 900, "failed": 0},
        "abandoned": {"given_up": 350},
        "engine_pid_kept": True,
        "memory": {
            "device": "cuda",
            "fragmentation": 0.02,
            "kv_cache_bytes": 240 << 30,
            "per_worker": [
                {**worker, "rank": 0, "device_uuid": UUIDS[2]},
                {**worker, "rank": 1, "device_uuid": UUIDS[0]},
            ],
        },
        "gpus": [{"index": 0, "gpu_util": 0.9, "gpu_memory_used": 0.95}, {"index": 2, "gpu_util": 0.9,
                                                                           "gpu_memory_used": 0.95}],
        "cleanup": {"trigger": "timer", "released": {"workers": 2, "released_bytes": 1 << 20}},
        "old_call": {"engine_died": True},
    }  # fmt: skip
    pinned = {**copy.deepcopy(main), "tensor_parallel": 1, "pinned": 2, "gpus": [{"index": 2, "gpu_util": 0.4}]}
    return [main, pinned]


def verdicts(device_result=None, run_results=None) -> dict:
    found = gpu_check().verdicts(device_result or device(), run_results or runs(), 3)
    return {point: row["verdict"] for point, row in found.items()}


def test_a_healthy_host_passes_every_gpu_point_and_names_the_cpu_proof_of_the_rest():
    assert verdicts() == {1: "pass", 2: "pass", 3: "cpu", 4: "cpu", 5: "cpu", 6: "pass", 7: "pass", 8: "pass"}
    found = gpu_check().verdicts(device(), runs(), 3)
    assert "tests/engine_node/test_vllm_gpu_paths.py::" in found[4]["evidence"]


def broken(what: str) -> tuple[dict, list[dict]]:
    dev, (main, pinned) = device(), runs()
    if what == "engine restarted under the calls":
        main["engine_pid_kept"] = False
    elif what == "requests failed":
        main["load"]["failed"] = 3
    elif what == "a worker missing":
        main["memory"]["per_worker"] = main["memory"]["per_worker"][:1]
    elif what == "old ratio":
        dev["allocator"]["checks"]["fragmentation_past_threshold"] = False
    elif what == "no KV cache found":
        main["memory"]["kv_cache_bytes"] = 0
    elif what == "context leaves less than 0.95":
        dev["context_memory"][1]["largest_utilization"] = 0.93
    elif what == "figures of GPU 0 and 1":
        main["gpus"] = [{"index": 0}, {"index": 1}]
    elif what == "pinned node reports GPU 0":
        pinned["gpus"] = [{"index": 0}]
    elif what == "slow start":
        main["start_s"] = 1300.0
    return dev, [main, pinned]


@pytest.mark.parametrize(
    ("what", "points"),
    [
        ("engine restarted under the calls", [1]),
        ("requests failed", [1]),
        ("a worker missing", [1, 7]),  # and the GPUs it runs on are no longer all accounted for
        ("old ratio", [2]),
        ("no KV cache found", [2]),
        ("context leaves less than 0.95", [6]),
        ("figures of GPU 0 and 1", [7]),
        ("pinned node reports GPU 0", [7]),
        ("slow start", [8]),
    ],
)
def test_each_failure_fails_its_own_point(what, points):
    found = verdicts(*broken(what))
    assert [p for p, verdict in found.items() if verdict == "fail"] == points


def test_a_run_that_never_started_fails_points_1_and_8():
    dev = device()
    failed = {"tensor_parallel": 2, "pinned": None, "error": "RuntimeError: the agent exited with 1"}
    found = verdicts(dev, [failed])
    assert found[1] == found[8] == "fail"


def test_a_cpu_rehearsal_judges_the_agent_run_only():
    found = gpu_check().verdicts({}, runs()[:1], 1, rehearsal=True)
    assert {p: r["verdict"] for p, r in found.items()} == {
        1: "pass", 2: "rehearsal", 3: "cpu", 4: "cpu", 5: "cpu", 6: "rehearsal", 7: "rehearsal", 8: "pass"
    }  # fmt: skip
