"""The agent half of scripts/gpu_check.py: a stand-alone agent on real vLLM, load on its engine, workers' calls the
caller leaves at once, the agent's own reading and cleanup from its /healthz, and the old call replayed last.

Stdlib only (the agent itself runs in its own interpreter, `--agent-python`); imports the schema's defaults to write
the agent's last good config.
"""

import contextlib
import hashlib
import json
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SERVED = "tiny"
# The agent's default start timeout (engine_node/settings.py START_TIMEOUT_S): the check reports how much of it the
# small model's start took.
AGENT_START_TIMEOUT_S = 1200.0
LOAD_S = 20.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def http(method: str, url: str, body: dict | None = None, timeout: float = 30) -> tuple[int, dict | str]:
    data = None if body is None else json.dumps(body).encode()
    # Only the loopback URLs of the agent and engine this script started.
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            text = response.read().decode()
            status = response.status
    except urllib.error.HTTPError as exc:
        text, status = exc.read().decode(errors="replace"), exc.code
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def node_config(engine: dict) -> dict:
    """A last good config for the stand-alone agent: the schema's defaults with this check's engine and a timed
    cleanup, hashed as the control plane hashes it."""
    from controlplane.params.schema import effective

    content = effective(
        {
            "engine": {"max_model_len": 1024, "max_num_seqs": 16, "served_model_name": SERVED, **engine},
            "batch": {"long_context_threshold": 512},
            "cleanup": {"interval_s": 30, "cooldown_s": 0, "max_duration_s": 120},
            "warmup": {"enabled": False},
        }
    )
    content["models"] = {"engine.model": None, "speculative.draft_model": None}
    canonical = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return {"version": None, "hash": hashlib.sha256(canonical.encode()).hexdigest(), "content": content}


class Agent:
    """One stand-alone agent process on vLLM, its gateway's /healthz and its engine's own port."""

    def __init__(self, args, work: Path, *, engine: dict, engine_args: list[str], env: dict):
        self.port, self.engine_port = free_port(), free_port()
        self.url, self.engine_url = f"http://127.0.0.1:{self.port}", f"http://127.0.0.1:{self.engine_port}"
        work.mkdir(parents=True, exist_ok=True)
        (work / "last_good_config.json").write_text(json.dumps(node_config(engine)), encoding="utf-8")
        self.log = work / "agent.log"
        self.argv = [
            args.agent_python, "-m", "engine_node", "--backend", "vllm", "--engine-python", args.engine_python,
            "--model", str(args.model), "--served-model-name", SERVED, "--node-name", "gpu-check",
            "--port", str(self.port), "--engine-port", str(self.engine_port), "--state-dir", str(work),
            *(f"--engine-arg={a}" for a in engine_args),
        ]  # fmt: skip
        self.env = {**os.environ, **env}
        self.process: subprocess.Popen | None = None

    def start(self) -> float:
        started = time.monotonic()
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                self.argv, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        while time.monotonic() - started < AGENT_START_TIMEOUT_S + 60:
            if self.process.poll() is not None:
                raise RuntimeError(f"the agent exited with {self.process.returncode}: {self.tail()}")
            with contextlib.suppress(OSError):
                if (self.health() or {}).get("status") == "online":
                    return time.monotonic() - started
            time.sleep(1)
        raise RuntimeError(f"the agent was not online within {AGENT_START_TIMEOUT_S + 60:.0f}s: {self.tail()}")

    def health(self) -> dict | None:
        _, body = http("GET", f"{self.url}/healthz", timeout=10)
        return body if isinstance(body, dict) else None

    def wait_for(self, predicate, timeout: float, what: str):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                value = predicate(self.health() or {})
                if value:
                    return value
            time.sleep(1)
        raise RuntimeError(f"no {what} within {timeout:.0f}s: {self.tail()}")

    def tail(self, lines: int = 15) -> str:
        with contextlib.suppress(OSError):
            return " | ".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


class Load:
    """Requests to the engine's own port from a few threads, long enough that model steps are always in flight."""

    def __init__(self, engine_url: str, threads: int = 8):
        self.engine_url, self.statuses, self._stop = engine_url, [], threading.Event()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]

    def _run(self) -> None:
        body = {"model": SERVED, "prompt": "Where is my order? " * 40, "max_tokens": 256, "ignore_eos": True}
        while not self._stop.is_set():
            try:
                status, _ = http("POST", f"{self.engine_url}/v1/completions", body, timeout=120)
            except OSError:
                status = 0
            self.statuses.append(status)

    def __enter__(self):
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(150)


def send_and_leave(engine_url: str, body: dict) -> None:
    """POST `body` to /collective_rpc and close the connection without waiting: a caller that stopped waiting."""
    host, port = engine_url.removeprefix("http://").split(":")
    data = json.dumps(body).encode()
    head = (f"POST /collective_rpc HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n").encode()  # fmt: skip
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(head + data)


def abandoned_calls(engine_url: str, body: dict, seconds: float) -> dict:
    """Workers' calls sent while model steps run, each left at once, as the agent leaves one a long step delays."""
    given_up = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            send_and_leave(engine_url, body)
            given_up += 1
        time.sleep(0.05)
    return {"given_up": given_up}


def agent_run(args, work: Path, *, tp: int, pinned: int | None, utilization: float) -> dict:
    """One agent: start, load with abandoned calls, its reading, a cleanup; with `replay`, the old call last."""
    env = {"CUDA_VISIBLE_DEVICES": str(pinned)} if pinned is not None else {}
    engine_args = ["--distributed-executor-backend=mp", f"--tensor-parallel-size={tp}"]
    agent = Agent(args, work, engine={"gpu_memory_utilization": utilization}, engine_args=engine_args, env=env)
    result: dict = {"tensor_parallel": tp, "pinned": pinned, "gpu_memory_utilization": utilization}
    try:
        result["start_s"] = round(agent.start(), 1)
        pid = agent.health()["engine_pid"]
        with Load(agent.engine_url) as load:
            time.sleep(2)
            result["abandoned"] = abandoned_calls(agent.engine_url, {"method": "fragmentation_stats"}, LOAD_S)
        result["load"] = {"requests": len(load.statuses), "failed": sum(1 for s in load.statuses if s != 200)}
        result["engine_pid_kept"] = agent.health()["engine_pid"] == pid
        health = agent.wait_for(lambda h: h if (h.get("memory") or {}).get("per_worker") else None, 60, "reading")
        result["memory"] = health["memory"]
        result["gpus"] = health.get("gpus")
        result["sample"] = {k: (health.get("sample") or {}).get("m", {}).get(k)
                            for k in ("gpu_util", "gpu_memory_used", "fragmentation_ratio", "absent")}  # fmt: skip
        result["cleanup"] = agent.wait_for(lambda h: h.get("last_cleanup"), 180, "timed cleanup")
        if pinned is None:
            result["old_call"] = replay_old_call(agent, pid)
    except (RuntimeError, OSError, KeyError, TypeError) as exc:
        result["error"] = f"{type(exc).__name__}: {exc}"[:1500]
    finally:
        agent.stop()
    return result


def replay_old_call(agent: Agent, pid: int) -> dict:
    """The call with `timeout` in the body, as the agent used to send it, under load: does this engine die?"""
    killed = False
    with Load(agent.engine_url):
        time.sleep(2)
        for _ in range(100):
            with contextlib.suppress(OSError, TimeoutError):
                http("POST", f"{agent.engine_url}/collective_rpc", {"method": "fragmentation_stats", "timeout": 1e-4})
            with contextlib.suppress(OSError):
                health = agent.health() or {}
                if health.get("engine_pid") != pid or health.get("status") != "online":
                    killed = True
                    break
            time.sleep(0.1)
    return {"engine_died": killed, "log": agent.tail(40) if killed else ""}
