"""Replay accuracy: how closely a replay's open-loop generator keeps the asked rate, and its own CPU per request.

Three simulator processes (`python -m engine_node.simulator`, a fast latency profile; simulated, not vLLM) serve
streamed chat requests. The same Poisson schedule at 200 QPS (drawn by controlplane.replays.plan, the replay's own
planner) is sent twice, slices alternating so noisy neighbours hit both alike:

- replay: `engine_node.replay_load.open_loop`, what each share of a replay run executes (every stream read to its
  end, TTFT, usage and the gateway's headers parsed into a row);
- baseline: a bare aiohttp open loop (sleep until due, post, read the body, nothing parsed), the least a sender can
  do.

Printed per sender: asked QPS (the schedule's own rate), achieved QPS (sent requests per second between first and
last send), their ratio (target: within 2 %), P99 send lag (sent - due), and CPU per request of the sending thread
(time.thread_time around its event loop), with the replay's CPU as a ratio of the baseline's.

Run from the repository root: `.venv/bin/python bench/replay.py [--qps 200] [--duration 10] [--rounds 2]`.
Every process it starts is stopped on exit.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

import django  # noqa: E402

django.setup()

import aiohttp  # noqa: E402

from controlplane.convlogs.reader import LogConversation, LogMessage  # noqa: E402
from controlplane.replays import plan as planning  # noqa: E402
from engine_node.loadgen import MESSAGES  # noqa: E402
from engine_node.replay_load import Shot, open_loop  # noqa: E402

PROFILE = """
latency:
  time_scale: 0.05
reply_length:
  median: 12
  sigma: 0.3
  min: 4
  max: 32
"""
NODES = 3


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_simulators(work: Path) -> tuple[list[subprocess.Popen], list[str]]:
    profile = work / "fast.yaml"
    profile.write_text(PROFILE)
    processes, urls = [], []
    for i in range(NODES):
        port = free_port()
        log = open(work / f"sim-{i}.log", "w")  # noqa: SIM115 - kept open for the process's life
        processes.append(
            subprocess.Popen(
                [sys.executable, "-m", "engine_node.simulator", "--port", str(port), "--profile", str(profile)],
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        )
        urls.append(f"http://127.0.0.1:{port}")
    for url in urls:
        port = int(url.rsplit(":", 1)[1])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                time.sleep(0.1)
    return processes, urls


def schedule(qps: float, duration_s: float, seed: int, urls: list[str]) -> list[Shot]:
    conversations = [
        LogConversation(f"c{i}", None, [LogMessage("user", MESSAGES[i % len(MESSAGES)])])
        for i in range(int(qps * duration_s * 2))
    ]
    planned = planning.plan(conversations, planning.Spec(qps=qps, seed=seed, duration_cap_s=duration_s))
    return [
        Shot(
            p.seq,
            p.at,
            planning.node_for(p.seq, urls),
            {"model": "simulated-chat-model", "messages": list(p.messages), "stream": True, "max_tokens": 32},
        )
        for p in planned
    ]


async def replay_sender(shots: list[Shot], start_at: float) -> list[float]:
    sent: list[float] = []
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1000)) as session:
        await open_loop(
            shots,
            start_at=start_at,
            session=session,
            on_outcome=lambda outcome: None,
            stopped=lambda: False,
            sent_hook=lambda outcome: sent.append(outcome.sent_s),
        )
    return sent


async def bare_sender(shots: list[Shot], start_at: float) -> list[float]:
    sent: list[float] = []
    pending = set()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1000)) as session:

        async def one(shot: Shot) -> None:
            try:
                async with session.post(f"{shot.url}/v1/chat/completions", json=shot.body) as response:
                    await response.read()
            except aiohttp.ClientError:
                pass

        for shot in shots:
            wait = start_at + shot.due_s - time.time()
            if wait > 0:
                await asyncio.sleep(wait)
            sent.append(time.time() - start_at)
            task = asyncio.create_task(one(shot))
            pending.add(task)
            task.add_done_callback(pending.discard)
        await asyncio.gather(*pending)
    return sent


def measure(sender, shots: list[Shot]) -> dict:
    start_at = time.time() + 0.5
    cpu = time.thread_time()
    sent = asyncio.run(sender(shots, start_at))
    cpu = time.thread_time() - cpu
    lags = sorted(s - shot.due_s for s, shot in zip(sent, shots, strict=True))
    asked = (len(shots) - 1) / (shots[-1].due_s - shots[0].due_s)
    achieved = (len(sent) - 1) / (max(sent) - min(sent))
    return {
        "asked": asked,
        "achieved": achieved,
        "lag_p99": lags[max(0, math.ceil(0.99 * len(lags)) - 1)],
        "cpu_per_request": cpu / len(sent),
        "requests": len(sent),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--qps", type=float, default=200)
    parser.add_argument("--duration", type=float, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-replay-") as work:
        processes, urls = start_simulators(Path(work))
        try:
            results: dict[str, list[dict]] = {"replay": [], "baseline": []}
            for round_ in range(args.rounds):
                shots = schedule(args.qps, args.duration, seed=round_, urls=urls)
                order = [("replay", replay_sender), ("baseline", bare_sender)]
                for name, sender in order if round_ % 2 == 0 else reversed(order):
                    results[name].append(measure(sender, shots))
        finally:
            for process in processes:
                process.terminate()
            for process in processes:
                process.wait(timeout=10)
    print(f"replay accuracy at {args.qps:g} QPS, {NODES} simulator nodes (simulated, not vLLM), streamed requests")
    print(f"{'sender':<10} {'requests':>8} {'asked':>8} {'achieved':>9} {'ratio':>7} {'lag p99':>9} {'CPU/req':>9}")
    cpu = {}
    for name, rows in results.items():
        for row in rows:
            print(
                f"{name:<10} {row['requests']:>8} {row['asked']:>8.2f} {row['achieved']:>9.2f} "
                f"{row['achieved'] / row['asked']:>7.4f} {row['lag_p99'] * 1000:>7.2f}ms "
                f"{row['cpu_per_request'] * 1e6:>7.0f}us"
            )
        cpu[name] = sum(r["cpu_per_request"] for r in rows) / len(rows)
    print(f"replay generator CPU per request: {cpu['replay'] / cpu['baseline']:.2f}x the bare aiohttp loop's")


if __name__ == "__main__":
    main()
