"""The simulator's step timeline on a busy machine: a reply takes its simulated time, whatever else holds a core.

Steps follow a simulated timeline (engine_node/simulator/scheduler.py, Engine.run): a loop woken late starts its
next step that much shorter, so lateness does not add up over a reply's hundreds of steps. One simulator (the demo
profile at time_scale 1: ~2.5 ms decode steps) answers a 300-token reply (ignore_eos) three times idle and three
times while another process spins on a core; printed: the simulated duration from the latency model, the best and
median wall time of each, and their ratio to the simulated time. Before the timeline each step overslept by the
loop's wake-up delay: 1.4-1.7x in total under the hog. Simulated figures, never a measurement of vLLM.

`.venv/bin/python bench/simulator_timeline.py`
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.simulator_profile import free_port, wait_healthy  # noqa: E402
from engine_node.simulator.model import LatencyModel  # noqa: E402
from engine_node.simulator.profile import load_profile  # noqa: E402

TOKENS = 300
REPEATS = 3


def post(port: int, body: dict) -> dict:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.loads(response.read())


def timed(port: int, body: dict) -> float:
    started = time.monotonic()
    reply = post(port, body)
    assert reply["usage"]["completion_tokens"] == TOKENS, reply["usage"]
    return time.monotonic() - started


def main() -> None:
    with tempfile.TemporaryDirectory() as directory:
        document = yaml.safe_load((ROOT / "engine_node/simulator/profiles/demo.yaml").read_text(encoding="utf-8"))
        document.setdefault("latency", {})["time_scale"] = 1.0
        profile_path = Path(directory) / "timeline.yaml"
        profile_path.write_text(yaml.safe_dump(document), encoding="utf-8")
        port = free_port()
        command = [sys.executable, "-m", "engine_node.simulator", "--port", str(port), "--profile",
                   str(profile_path), "--served-model-name", "demo"]  # fmt: skip
        process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_healthy(port, process)
            body = {"messages": [{"role": "user", "content": "tell me everything"}], "max_tokens": TOKENS,
                    "ignore_eos": True}  # fmt: skip
            probe = post(port, {**body, "max_tokens": 1})
            model = LatencyModel(load_profile(profile_path, env={}), None, None)
            simulated = model.step_seconds(probe["usage"]["prompt_tokens"], 0) + (TOKENS - 1) * model.step_seconds(0, 1)
            idle = [timed(port, body) for _ in range(REPEATS)]
            hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
            try:
                busy = [timed(port, body) for _ in range(REPEATS)]
            finally:
                hog.kill()
                hog.wait()
        finally:
            process.terminate()
            process.wait(timeout=10)
    print(
        f"simulator timeline, a {TOKENS}-token reply: simulated {simulated:.3f} s "
        "(latency model, the demo profile at time_scale 1)"
    )
    for label, times in (("idle", idle), ("a core held by a hog", busy)):
        best, median = min(times), statistics.median(times)
        print(f"  {label:<22} best {best:.3f} s  median {median:.3f} s  median / simulated {median / simulated:.2f}x")
    print("  (before the timeline: 1.4-1.7x under the hog; the target is under 1.15x)")


if __name__ == "__main__":
    main()
