"""The gateway bench's agent under test: its settings (profile, policy bundle, client key), the processes it runs
and what they cost (CPU time from /proc). Part of bench/gateway.py (run that)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


from controlplane.params import schema  # noqa: E402
from engine_node.config import content_hash  # noqa: E402

MODEL = "simulated-chat-model"
SYSTEM_PROMPT = "你是某电商平台的客服助手，请简洁、准确地回答顾客的问题。"
# ~100 ms replies: 8-160 tokens (median 40) at ~2.6 ms per decode step with a few sequences running.
PROFILE = """\
latency:
  time_scale: 0.1
reply_length:
  median: 40
  sigma: 0.5
  min: 8
  max: 160
"""
REPLY_MAX_TOKENS = 160
BUNDLE = {
    "pool": "bench",
    "whitelists": {"legal": ["legal_policy"]},
    "overrides": [],
    "degradation": {"active": False, "reason": "", "since": None},
    "intent_model": None,
}
REQUEST_TIMEOUT_S = 60
START_TIMEOUT_S = 60
# The gateway's client key: in the bundle as its sha256 (the `client_keys` section; a gateway from before client keys
# ignores the section and the header, so the same script measures both). Built here, not imported, for that reason.
CLIENT_KEY = "cpk_" + secrets.token_urlsafe(32)
BUNDLE["client_keys"] = [
    {
        "name": "bench",
        "prefix": CLIENT_KEY[:12],
        "sha256": hashlib.sha256(CLIENT_KEY.encode()).hexdigest(),
        "kind": "client",
        "business_tags": [],
    }
]
CLOCK_TICK_S = 1 / os.sysconf("SC_CLK_TCK")


# --- processes ----------------------------------------------------------------------------------------------------


def port_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def pick_port(requested: int, what: str, taken: set[int]) -> int:
    if requested:
        if not port_free(requested) or requested in taken:
            raise SystemExit(f"bench/gateway.py: port {requested} ({what}) is in use; pass another, or 0 for any")
        return requested
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if port not in taken:
            return port


def child_pids(pid: int) -> list[int]:
    """Direct children of pid, from /proc (the agent starts its engine in a session of its own)."""
    children = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # The command name may hold spaces and parentheses: fields start after the last ")".
        fields_ = stat[stat.rindex(")") + 2 :].split()
        if int(fields_[1]) == pid:
            children.append(int(entry.name))
    return children


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class AgentUnderTest:
    """One `python -m engine_node` on the simulator, in its own session, with a config on its disk."""

    def __init__(
        self, *, name: str, work: Path, gateway_port: int, engine_port: int, batch: dict, seed: int, root: Path = ROOT
    ):
        """`root`: the source tree the agent runs from (another revision's, for a before/after comparison)."""
        self.name = name
        self.root = root
        self.state_dir = work / name
        self.gateway_port = gateway_port
        self.engine_port = engine_port
        self.gateway_url = f"http://127.0.0.1:{gateway_port}"
        self.engine_url = f"http://127.0.0.1:{engine_port}"
        self.log_path = self.state_dir / "agent.log"
        self.content = schema.defaults()
        self.content["batch"].update(batch)
        self.bundle = BUNDLE
        self.process: subprocess.Popen | None = None
        self.engine_pid: int | None = None
        self.pids: set[int] = set()
        profile = work / "profile.yaml"
        profile.write_text(PROFILE, encoding="utf-8")
        self.args = [
            sys.executable, "-m", "engine_node",
            "--backend", "simulator", "--simulator-profile", str(profile),
            "--node-name", name, "--port", str(gateway_port), "--engine-port", str(engine_port),
            "--state-dir", str(self.state_dir), "--queue-timeout", "30", "--drain-timeout", "5",
            # No liveness probes during the measurement: each is a request the engine would serve.
            "--probe-interval", "3600",
            f"--engine-arg=--seed={seed}",
        ]  # fmt: skip

    def write_state(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        digest = content_hash(self.content)
        message = {
            "version": {"template": "bench", "number": 1, "hash": digest},
            "hash": digest,
            "content": self.content,
        }
        (self.state_dir / "last_good_config.json").write_text(json.dumps(message), encoding="utf-8")
        bundle = {"hash": content_hash(self.bundle), "content": self.bundle}
        (self.state_dir / "policy_bundle.json").write_text(json.dumps(bundle), encoding="utf-8")

    def start(self) -> None:
        self.write_state()
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child keeps it for its life
        try:
            # The agent reads ENGINE_NODE_* defaults and the simulator SIMULATOR_FAULTS from the environment: none
            # of the caller's may change what is measured.
            env = {k: v for k, v in os.environ.items() if not k.startswith(("ENGINE_NODE_", "SIMULATOR_"))}
            self.process = subprocess.Popen(
                self.args, cwd=self.root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        finally:
            log.close()
        self.pids.add(self.process.pid)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            self.pids.update(child_pids(self.process.pid))
            if self.process.poll() is not None:
                raise RuntimeError(f"agent {self.name} exited with {self.process.returncode}:\n{self.log_tail()}")
            health = http_json(f"{self.gateway_url}/healthz")
            if health and health.get("status") == "online":
                self.engine_pid = health.get("engine_pid")
                if self.engine_pid:
                    self.pids.add(self.engine_pid)
                break
            time.sleep(0.2)
        else:
            raise RuntimeError(f"agent {self.name} not online after {START_TIMEOUT_S}s:\n{self.log_tail()}")
        version = http_json(f"{self.engine_url}/version") or {}
        if not version.get("simulated"):
            raise RuntimeError(f"{self.engine_url} is not the agent's simulator (/version says {version})")

    def log_tail(self, lines: int = 25) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        """SIGTERM the agent's process group (it stops its engine), SIGKILL whatever is left of either."""
        if self.process is None:
            return
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut this short
        try:
            self._stop()
        finally:
            signal.signal(signal.SIGINT, previous)

    def _stop(self) -> None:
        self.pids.update(child_pids(self.process.pid))
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=5)
        for pid in self.pids - {self.process.pid}:
            deadline = time.monotonic() + 5
            while alive(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            if alive(pid) and is_ours(pid):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)
        self.process = None


def is_ours(pid: int) -> bool:
    """The pid still runs something this script started (not a recycled pid)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"engine_node" in cmdline


def process_cpu_s(pid: int) -> float:
    """User plus system CPU seconds of one process (its threads included, its children not)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields_ = stat[stat.rindex(")") + 2 :].split()
    return (int(fields_[11]) + int(fields_[12])) * CLOCK_TICK_S


def http_json(url: str) -> dict | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        with contextlib.suppress(ValueError):
            return json.loads(exc.read())
    except (OSError, ValueError):
        pass
    return None
