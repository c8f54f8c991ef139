"""What a simulator profile delivers at the field report's load, against the report's own figure (P99 1.4 s at 53 QPS).

One simulator (`python -m engine_node.simulator`, the seed template's engine flags: max_num_seqs 64, max_model_len
8192, prefix caching) with the given profile, loaded open loop (Poisson arrivals) by non-streaming chat requests
with the first-turn cap max_tokens 256 and messages of engine_node/policy/data/intents.jsonl. The load runs slowed
down by `--slowdown` (the profile's time_scale multiplied, the rate divided by it), so that the load generator and
the simulator's Python need a fraction of the CPU they would at full speed, and the latencies are divided back: the
figures are the latency model's, not this machine's. Prints p50 and p99 in profile time, the achieved rate (the
generator lags a little on a busy machine) and the share of replies the cap cut, and the p99 as a ratio to the
report's 1.4 s. Simulated numbers, never a measurement of vLLM.

`.venv/bin/python bench/simulator_profile.py [--profile engine_node/simulator/profiles/demo.yaml] [--qps 53]`
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine_node.policy.dataset import DATASET_PATH  # noqa: E402
from engine_node.simulator.profile import load_profile  # noqa: E402
from engine_node.warmup import percentile  # noqa: E402

REPORT_P99_S = 1.4
REPORT_QPS = 53.0
MAX_TOKENS = 256


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def slowed_profile(path: str, slowdown: float, directory: Path) -> Path:
    """The profile with its time_scale multiplied by `slowdown` (keys it omits still come from default.yaml)."""
    document = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    scale = load_profile(path).time_scale * slowdown
    document.setdefault("latency", {})["time_scale"] = scale
    slowed = directory / "profile.yaml"
    slowed.write_text(yaml.safe_dump(document), encoding="utf-8")
    return slowed


async def load(port: int, qps: float, duration_s: float, slowdown: float) -> dict:
    messages = [json.loads(line)["text"] for line in DATASET_PATH.read_text(encoding="utf-8").splitlines() if line]
    rng = random.Random(1)
    latencies: list[float] = []
    tokens: list[int] = []
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one(index: int) -> None:
            body = {
                "model": "demo",
                "messages": [{"role": "user", "content": f"{rng.choice(messages)} #{index}"}],
                "max_tokens": MAX_TOKENS,
            }
            started = time.monotonic()
            async with session.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body) as response:
                answer = await response.json()
                if response.status != 200:
                    raise RuntimeError(f"simulator answered {response.status}: {answer}")
            latencies.append((time.monotonic() - started) / slowdown)
            tokens.append(answer["usage"]["completion_tokens"])

        tasks = []
        loop = asyncio.get_running_loop()
        started = loop.time()
        while loop.time() - started < duration_s:
            tasks.append(asyncio.create_task(one(len(tasks))))
            await asyncio.sleep(rng.expovariate(qps / slowdown))
        await asyncio.gather(*tasks)
        async with session.get(f"http://127.0.0.1:{port}/sim/state") as response:
            state = await response.json()
    latencies.sort()
    return {
        "requests": len(latencies),
        "achieved_qps": len(latencies) / duration_s * slowdown,
        "p50_s": percentile(latencies, 0.50),
        "p99_s": percentile(latencies, 0.99),
        "capped_share": sum(1 for t in tokens if t >= MAX_TOKENS) / len(tokens),
        "peak_running": state["max_running_observed"],
    }


def wait_healthy(port: int, process: subprocess.Popen) -> None:
    import urllib.request

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and process.poll() is None:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1).read()
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit("the simulator did not start")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default=str(ROOT / "engine_node/simulator/profiles/demo.yaml"))
    parser.add_argument("--qps", type=float, default=REPORT_QPS, help="requests per second in profile time")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of wall-clock load")
    parser.add_argument("--slowdown", type=float, default=4.0, help="time_scale multiplier (see the docstring)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        profile = slowed_profile(args.profile, args.slowdown, Path(directory))
        port = free_port()
        command = [sys.executable, "-m", "engine_node.simulator", "--port", str(port), "--profile", str(profile),
                   "--max-num-seqs", "64", "--max-model-len", "8192", "--served-model-name", "demo"]  # fmt: skip
        process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_healthy(port, process)
            result = asyncio.run(load(port, args.qps, args.duration, args.slowdown))
        finally:
            process.terminate()
            process.wait(timeout=10)
    print(f"simulator profile {Path(args.profile).name} at {args.qps:g} QPS, max_tokens {MAX_TOKENS} (simulated):")
    print(
        f"  {result['requests']} requests, achieved {result['achieved_qps']:.1f} QPS, "
        f"p50 {result['p50_s']:.3f} s, p99 {result['p99_s']:.3f} s, {result['capped_share']:.1%} cut by the cap, "
        f"peak running batch {result['peak_running']}"
    )
    print(f"  p99 / field report's P99 {REPORT_P99_S} s at {REPORT_QPS:g} QPS: {result['p99_s'] / REPORT_P99_S:.2f}x")


if __name__ == "__main__":
    main()
