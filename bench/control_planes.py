"""Helpers of the control-plane benchmarks: N daphne processes on consecutive ports, and a job that keeps one core busy.

Several processes behind a load balancer are what production runs (docs/deploy.md); here each fake agent or browser
connects to one process directly, round-robin, as a load balancer with sticky WebSockets would spread them.
"""

import contextlib
import multiprocessing
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def daphnes(count: int, port: int, env: dict):
    """`count` daphne processes serving the control plane on `port`, `port + 1`, ...; yields their ports."""
    processes = []
    ports = [port + i for i in range(count)]
    log_dir = os.environ.get("BENCH_DAPHNE_LOG_DIR")  # daphne's output, for when a run fails
    try:
        for p in ports:
            output = open(Path(log_dir) / f"daphne-{p}.log", "wb") if log_dir else subprocess.DEVNULL  # noqa: SIM115
            processes.append(
                subprocess.Popen(
                    [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(p), "controlplane.asgi:application"],
                    cwd=ROOT,
                    env=env,
                    stdout=output,
                    stderr=subprocess.STDOUT,
                )
            )
        for p, process in zip(ports, processes, strict=True):
            _wait_listening(p, process)
        yield ports
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()


def _wait_listening(port: int, process: subprocess.Popen, timeout_s: float = 60) -> None:
    """Until daphne accepts connections (it takes seconds to import Django on a loaded machine)."""
    deadline = time.monotonic() + timeout_s
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"daphne exited with {process.returncode}; is port {port} taken? (BENCH_PORT)")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"daphne did not listen on port {port} within {timeout_s:.0f} s")
        time.sleep(0.2)


def _spin() -> None:
    while True:
        pass


@contextlib.contextmanager
def busy_core(enabled: bool = True):
    """Another job on the machine: a process that spins on one core for as long as the block runs."""
    if not enabled:
        yield
        return
    spinner = multiprocessing.Process(target=_spin, daemon=True)
    spinner.start()
    try:
        yield
    finally:
        spinner.terminate()
        spinner.join(5)


def load_text() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.1f} / {five:.1f} / {fifteen:.1f} on {os.cpu_count()} cores"
