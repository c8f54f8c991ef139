"""Stopping the agent stops its engine: SIGTERM twice in a row, SIGTERM with a long reply in flight (within
seconds), and SIGKILL (the kernel stops the engine for it)."""

import http.client
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from engine_node.client_keys import key_entry
from tests.engine_node.fleet import TEST_CLIENT_KEY, wait_until, write_key_file
from tests.live_server import ROOT, free_port, wait_for_port

pytestmark = pytest.mark.subprocess


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


def test_a_killed_agent_takes_its_engine_with_it(tmp_path):
    """SIGKILL leaves the agent no time to stop its engine, which runs in its own session: the kernel does it."""
    port = free_port()
    agent = subprocess.Popen(
        [sys.executable, "-m", "engine_node", "--backend", "simulator", "--port", str(port),
         "--state-dir", str(tmp_path)],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        wait_for_port(port, 30, agent)
        engine_pid = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5).read())[
            "engine_pid"
        ]
        assert alive(engine_pid)
        agent.kill()
        agent.wait(timeout=5)
        wait_until(lambda: not alive(engine_pid), 5, "the engine to exit after its agent was killed")
    finally:
        if agent.poll() is None:
            agent.kill()


def test_sigterm_stops_an_agent_with_a_long_request_in_flight_within_seconds(tmp_path):
    """A reply still streaming (minutes of it) gets the gateway's shut-down grace, not the whole reply."""
    profile = tmp_path / "slow.yaml"
    profile.write_text("latency:\n  time_scale: 1.0\n")
    port = free_port()
    keys = write_key_file(tmp_path / "keys.json", [key_entry(TEST_CLIENT_KEY, name="tests")])
    agent = subprocess.Popen(
        [sys.executable, "-m", "engine_node", "--backend", "simulator", "--simulator-profile", str(profile),
         "--port", str(port), "--state-dir", str(tmp_path), "--client-keys-file", str(keys)],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        wait_for_port(port, 30, agent)
        wait_until(lambda: json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz").read())["status"]
                   == "online", 30, "the node to serve")  # fmt: skip
        engine_pid = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz").read())["engine_pid"]
        body = {"messages": [{"role": "user", "content": "everything, please"}], "max_tokens": 8000,
                "ignore_eos": True, "stream": True}  # fmt: skip
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {TEST_CLIENT_KEY}"}
        connection.request("POST", "/v1/chat/completions", json.dumps(body), headers)
        response = connection.getresponse()
        assert response.status == 200
        response.read1(100)  # streaming: ~80 s of simulated decoding are ahead of it

        agent.send_signal(signal.SIGTERM)
        assert agent.wait(timeout=60) == 0
        # The agent ended before the reply did: the stream stops short of its 8,000th token.
        try:
            rest = response.read()
        except http.client.IncompleteRead as cut:
            rest = cut.partial
        assert not re.search(rb'"finish_reason"\s*:\s*"length"', rest), rest[-300:]
        wait_until(lambda: not alive(engine_pid), 5, "the engine to exit with its agent")
        connection.close()
    finally:
        if agent.poll() is None:
            agent.kill()
