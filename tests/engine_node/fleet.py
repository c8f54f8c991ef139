"""Helpers for tests that run real agents (subprocesses) against a real control plane (daphne)."""

import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path

from engine_node.client_keys import key_entry
from tests.live_server import ROOT, free_port, wait_for_port

# Every AgentProcess accepts this key from an operator key file (--client-keys-file) unless a test passes
# client_key=None: tests that are not about access call the gateway with it (AgentProcess.headers, .chat(),
# .openai_client()). Tests of the pool's keys pushed by the control plane issue real ones (provision_client_key).
TEST_CLIENT_KEY = "cpk_TestKeyOfAgentProcesses_7Jx2Qm9vLw4Rt8Yp3Nc6"
TEST_KEY_TAGS = ("contract", "copywriting", "legal", "order_status")

FAST_PROFILE = """
latency:
  time_scale: 0.05
reply_length:
  median: 12
  sigma: 0.3
  min: 4
  max: 32
"""


# A wait asks whether something happens at all, not how fast: on a machine shared by parallel workers, engines and
# browsers, a few seconds bound nothing but the load. No wait gives up before this (it returns as soon as it can).
MIN_WAIT_S = 30.0


def wait_until(predicate, timeout_s: float, what: str, interval_s: float = 0.1, explain=None):
    """Poll `predicate` until it is truthy; on time-out fail with `what` and, when given, `explain()`: the state a
    reader needs to tell why (a run that fails once on a busy machine must say what it was waiting on). The time-out
    is at least MIN_WAIT_S."""
    timeout_s = max(timeout_s, MIN_WAIT_S)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval_s)
    detail = ""
    if explain is not None:
        try:
            detail = "\n" + explain()
        except Exception as exc:  # the explanation must never hide the time-out itself
            detail = f"\n(could not explain: {exc!r})"
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}{detail}")


def log_tail(agent: "AgentProcess", lines: int = 30) -> str:
    """The last lines of an agent's log (stdout and stderr), for failure messages."""
    try:
        text = agent.log_path.read_text(errors="replace").splitlines()
    except OSError as exc:
        return f"(no log: {exc})"
    return "\n".join(text[-lines:])


class AgentProcess:
    """`python -m engine_node` with its own gateway port and state directory (simulator backend by default)."""

    def __init__(
        self,
        *,
        name: str,
        token: str = "",
        control_plane_url: str | None,
        work: Path,
        profile: Path | None = None,
        backend_args: list[str] | None = None,
        env: dict | None = None,
        model: str = "simulated-chat-model",
        queue_timeout_s: float = 10,
        client_key: str | None = TEST_CLIENT_KEY,
        extra_args: list[str] | None = None,
    ):
        self.name = name
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.state_dir = work / name
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.state_dir / "agent.log"
        self.model = model
        self.client_key = client_key
        key_args = []
        if client_key is not None:
            key_file = self.state_dir / "client_keys.json"
            write_key_file(key_file, [key_entry(client_key, name="tests", business_tags=TEST_KEY_TAGS)])
            key_args = ["--client-keys-file", str(key_file)]
        backend = (
            backend_args
            if backend_args is not None
            else ["--backend", "simulator", "--simulator-profile", str(profile)]
        )
        self.args = [
            sys.executable, "-m", "engine_node", *backend,
            "--node-name", name,
            *(["--control-plane-url", control_plane_url] if control_plane_url else []),
            "--port", str(self.port),
            "--state-dir", str(self.state_dir),
            "--drain-timeout", "10",
            "--queue-timeout", str(queue_timeout_s),
            *key_args,
            *(extra_args or []),
        ]  # fmt: skip
        self.env = {**os.environ, **(env or {}), "ENGINE_NODE_TOKEN": token}
        self.process: subprocess.Popen | None = None

    def start(self, timeout_s: float = 30) -> None:
        self.launch()
        wait_for_port(self.port, timeout_s, self.process)

    def launch(self) -> None:
        """Start the process without waiting for its gateway to listen (start_agents waits for several at once)."""
        out = open(self.log_path, "a")  # noqa: SIM115 - kept open for the process's life
        self.process = subprocess.Popen(self.args, cwd=ROOT, env=self.env, stdout=out, stderr=subprocess.STDOUT)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            self._wait_stopped()

    def _wait_stopped(self) -> None:
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()

    @property
    def headers(self) -> dict:
        """What a client sends: the key (when the agent has one) and JSON."""
        auth = {"Authorization": f"Bearer {self.client_key}"} if self.client_key else {}
        return {"Content-Type": "application/json", **auth}

    def openai_client(self, timeout_s: float = 30, **kwargs):
        import openai

        return openai.OpenAI(
            base_url=f"{self.url}/v1", api_key=self.client_key or "none", max_retries=0, timeout=timeout_s, **kwargs
        )

    def health(self) -> dict:
        try:
            with urllib.request.urlopen(f"{self.url}/healthz", timeout=5) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return json.loads(exc.read())

    def chat(self, text: str = "我的订单到哪了？", timeout_s: float = 30) -> tuple[int, dict]:
        body = json.dumps(
            {"model": self.model, "messages": [{"role": "user", "content": text}], "max_tokens": 16}
        ).encode()
        request = urllib.request.Request(f"{self.url}/v1/chat/completions", data=body, headers=self.headers)
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            try:
                error = json.loads(exc.read())
            except ValueError:
                error = {}
            return exc.code, {"retry_after": exc.headers.get("Retry-After"), **error}


def start_agents(agents: list[AgentProcess], timeout_s: float = 30) -> None:
    """Start every agent at once, then wait until each gateway listens: an agent's start-up is mostly its own imports
    and its engine's, so a fleet comes up in about the time of one start instead of one after another."""
    for agent in agents:
        agent.launch()
    for agent in agents:
        wait_for_port(agent.port, timeout_s, agent.process)


def stop_agents(agents: list[AgentProcess]) -> None:
    """Stop every agent: all are asked to stop (SIGTERM) before any is waited for, as start_agents starts them."""
    running = [agent for agent in agents if agent.process and agent.process.poll() is None]
    for agent in running:
        agent.process.terminate()
    for agent in running:
        agent._wait_stopped()


def write_key_file(path: Path, entries: list[dict]) -> Path:
    """An operator key file (`{"client_keys": [...]}`) as `python -m engine_node.client_keys new` writes it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"client_keys": entries}), encoding="utf-8")
    return path


def provision_client_key(actor, pools, *, name: str = "test-client", business_tags=(), kind: str = "client") -> str:
    """Issue a real client key for `pools` through the control plane's service (pushed to their agents)."""
    from controlplane.nodes.services.client_keys import client_key_create

    _, key = client_key_create(actor=actor, name=name, pools=list(pools), kind=kind, business_tags=business_tags)
    return key


def engine_cmdline(pid: int) -> list[str]:
    """The engine child's argv, read from /proc."""
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().rstrip("\0").split("\0")


def flag_value(args: list[str], flag: str) -> str | None:
    """The value of `--flag=value` in an argv (the agent passes every engine option that way), or None."""
    values = [arg.removeprefix(flag + "=") for arg in args if arg.startswith(flag + "=")]
    return values[-1] if values else None


def engine_url(agent: "AgentProcess") -> str:
    """The engine's own address on 127.0.0.1, from its command line."""
    return f"http://127.0.0.1:{flag_value(engine_cmdline(agent.health()['engine_pid']), '--port')}"


class Traffic:
    """Steady chat requests to every agent from background threads; counts outcomes by status.

    A client as the official `openai` one behaves: a 503 with Retry-After (a node warming up after a cold change) is
    retried after that many seconds, at most twice; only what still fails then counts as failed (`retried` counts the
    retries)."""

    RETRIES = 2

    def __init__(self, agents: list[AgentProcess], per_agent_threads: int = 2, texts: list[str] | None = None):
        """`texts`: messages sent in turn (numbered so no two are alike); the default is one fixed message."""
        self.agents = agents
        self.texts = texts
        self.outcomes: Counter = Counter()
        self.errors: list[str] = []
        self.retried = 0
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._loop, args=(agent,), daemon=True)
            for agent in agents
            for _ in range(per_agent_threads)
        ]

    def _loop(self, agent: AgentProcess) -> None:
        while not self._stop.is_set():
            text = self._text() if self.texts else None
            for attempt in range(self.RETRIES + 1):
                try:
                    status, body = agent.chat(text) if text else agent.chat()
                except Exception as exc:  # a reset or refused connection is exactly what must not happen
                    status, body = "exception", {}
                    self.errors.append(f"{agent.name}: {exc!r}")
                retry_after = body.get("retry_after") if status == 503 else None
                if retry_after is None or attempt == self.RETRIES or self._stop.is_set():
                    break
                self.retried += 1
                time.sleep(min(float(retry_after), 5.0))
            self.outcomes[status] += 1

    def _text(self) -> str:
        count = sum(self.outcomes.values())
        return f"{self.texts[count % len(self.texts)]} #{count}"

    def __enter__(self):
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)

    @property
    def failed(self) -> int:
        return sum(count for status, count in self.outcomes.items() if status != 200)


def vllm_agent(*, vllm_python: Path, model_dir: Path, queue_timeout_s: float, **kwargs) -> AgentProcess:
    """An agent running the real vLLM CPU build on the tiny test model (eager mode; probes every 30 s)."""
    from tests.engine_node.conftest import SERVED_MODEL_NAME, VLLM_ENV

    return AgentProcess(
        backend_args=[
            "--backend",
            "vllm",
            "--engine-python",
            str(vllm_python),
            "--model",
            str(model_dir),
            "--served-model-name",
            SERVED_MODEL_NAME,
            "--engine-arg=--enforce-eager",
            "--probe-interval",
            "30",
        ],
        env=VLLM_ENV,
        model=SERVED_MODEL_NAME,
        queue_timeout_s=queue_timeout_s,
        **kwargs,
    )
