"""Stopping the agent stops its engine, even when the supervisor sends SIGTERM twice in a row."""

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

from tests.engine_node.fleet import wait_until
from tests.live_server import ROOT, free_port, wait_for_port


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it has exited all the same.
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split()[2] != "Z"


def test_double_sigterm_leaves_no_engine_behind(tmp_path):
    port = free_port()
    agent = subprocess.Popen(
        [sys.executable, "-m", "engine_node", "--backend", "simulator", "--port", str(port),
         "--state-dir", str(tmp_path)],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        wait_for_port(port, 30, agent)
        health = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5).read())
        engine_pid = health["engine_pid"]
        assert alive(engine_pid)
        agent.send_signal(signal.SIGTERM)
        time.sleep(0.05)
        agent.send_signal(signal.SIGTERM)
        assert agent.wait(timeout=30) == 0
        wait_until(lambda: not alive(engine_pid), 5, "the engine to exit with its agent")
    finally:
        if agent.poll() is None:
            agent.kill()
