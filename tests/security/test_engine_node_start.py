"""What the agent hands on and what it connects to (issue "Close the trust boundaries", item 6).

The engine child (the simulator here; vLLM in test_vllm_engine_boundaries.py) runs model code and serves
unauthenticated dev endpoints on loopback: it must not inherit the node token or any other secret of the agent.
And the node token must never cross the network in clear text: plain ws:// is refused to a control plane that is
not on the node itself, unless the operator says so explicitly.
"""

import subprocess
import sys
from pathlib import Path

import pytest

from tests.engine_node.fleet import FAST_PROFILE, AgentProcess, wait_until
from tests.live_server import ROOT, free_port, wait_for_port

pytestmark = pytest.mark.subprocess

TOKEN = "node-token-7f3c9a1e5b"
SECRETS = {
    "AWS_SECRET_ACCESS_KEY": "aws-secret-4d2b8e",
    "DATABASE_URL": "postgres://cp:db-password-91a@db/cp",
    "ENGINE_NODE_SESSION_GRACE_S": "5",
}


def environ_of(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
    return dict(item.split("=", 1) for item in raw.split("\0") if "=" in item)


def test_the_engine_child_never_sees_the_node_token(tmp_path):
    profile = tmp_path / "fast.yaml"
    profile.write_text(FAST_PROFILE)
    agent = AgentProcess(name="n1", token=TOKEN, control_plane_url=None, work=tmp_path, profile=profile, env=SECRETS)
    try:
        agent.start()
        wait_until(lambda: agent.health().get("engine_pid"), 30, "the engine to start")
        pid = agent.health()["engine_pid"]
        # The agent itself holds them, so the test would notice if they never reached the node at all.
        assert environ_of(agent.process.pid)["ENGINE_NODE_TOKEN"] == TOKEN
        engine_env = environ_of(pid)
        raw = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
        assert TOKEN not in raw
        for value in SECRETS.values():
            if len(value) > 3:
                assert value not in raw
        assert not [name for name in engine_env if name.startswith("ENGINE_NODE_")]
        assert engine_env["VLLM_SERVER_DEV_MODE"] == "1" and engine_env.get("PATH")
        assert agent.chat()[0] == 200
    finally:
        agent.stop()


def run_agent(*args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "engine_node", "--backend", "simulator", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.parametrize("url", ["ws://192.0.2.10:8000/ws/agent/", "ws://cp.example.com/ws/agent/"])
def test_plain_ws_to_a_remote_control_plane_is_refused_at_start(url, tmp_path):
    result = run_agent("--control-plane-url", url, "--state-dir", str(tmp_path))
    assert result.returncode == 2
    assert "--control-plane-url: ws:// to" in result.stderr and "use wss://" in result.stderr
    assert "--insecure-control-plane" in result.stderr
    # Refused as an argument error (exit 2), before any engine starts or any config is applied.
    assert not (tmp_path / "last_good_config.json").exists()


def test_the_operator_can_allow_plain_ws_explicitly(tmp_path):
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable, "-m", "engine_node", "--backend", "simulator", "--port", str(port),
            "--state-dir", str(tmp_path), "--control-plane-url", "ws://192.0.2.10:8000/ws/agent/",
            "--insecure-control-plane",
        ],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_for_port(port, 60, process)
    finally:
        process.terminate()
        process.wait(timeout=30)
