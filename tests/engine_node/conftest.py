"""Fixtures for tests that run the real vLLM CPU build from .venv-vllm (built by `make vllm-env`).

- vllm_python: the venv's interpreter; the test skips when .venv-vllm is absent (a skip fails `make test`). While
  `make test` still installs it in the background (VLLM_ENV_STATUS names the file its exit status will be written
  to), the fixture waits for it, and fails with the install log's tail if the install failed.
- tiny_model_dir / tiny_draft_model_dir: scripts/make_tiny_model.py output, cached under var/models/.
- free_port: a free TCP port on 127.0.0.1.
- start_vllm(args=(), *, model=None, env=None, ...): starts `python -m vllm.entrypoints.openai.api_server`
  on a free port, waits until a real 1-token chat completion succeeds, and returns a VllmServer.
  Every server it started is stopped (SIGTERM, then SIGKILL of its process group) at teardown.
  start_module_vllm: the same for a server the tests of one module share.
- vllm_node: this test's pool `cpu`, node `cpu-1` and daphne around the session's one agent on real vLLM
  (`vllm_node.connect()`, `vllm_node.start_fresh(config)`; tests/engine_node/vllm_node.py says what is reset).
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.engine_node.vllm_node import SharedVllmAgent, VllmNode

ROOT = Path(__file__).resolve().parents[2]
VLLM_VENV = ROOT / ".venv-vllm"
VLLM_PYTHON = VLLM_VENV / "bin" / "python"
MODELS_DIR = ROOT / "var" / "models"
MAKE_TINY_MODEL = ROOT / "scripts" / "make_tiny_model.py"

SERVED_MODEL_NAME = "tiny"
# The tiny model's max_position_embeddings is 2048; 1024 keeps the KV-cache bookkeeping small.
DEFAULT_SERVER_ARGS = ("--enforce-eager", "--max-model-len", "1024", "--max-num-seqs", "4")
VLLM_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB; without it the CPU backend reserves 92% of the NUMA node's memory
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
}
STARTUP_TIMEOUT_S = 240.0  # about 30 s on an idle 2-core machine
# vLLM 0.32 exits ~0.5 s after SIGTERM when idle, but with a request in flight (and the default
# --shutdown-timeout 0) uvicorn sometimes waits for the client connection indefinitely: SIGKILL then.
STOP_TIMEOUT_S = 20.0


def pytest_configure(config):
    config.addinivalue_line("markers", "vllm: runs the real vLLM CPU server from .venv-vllm (make vllm-env)")


def get_free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def metric_value(exposition: str, name: str) -> float | None:
    """Sum of all samples called `name` (any labels) in a Prometheus text exposition; None if absent."""
    total, found = 0.0, False
    for line in exposition.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
            found = True
    return total if found else None


class VllmServerError(RuntimeError):
    pass


class VllmServer:
    """One `vllm.entrypoints.openai.api_server` process, started in its own session (process group)."""

    def __init__(self, python: Path, model: Path, args: Sequence[str], *, port: int, log_path: Path, env: dict):
        self.model = Path(model)
        self.port = port
        self.base_url = f"http://127.0.0.1:{port}"
        self.log_path = log_path
        self.command = [
            str(python),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(model),
            "--served-model-name",
            SERVED_MODEL_NAME,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            *args,
        ]
        self.env = env
        self.process: subprocess.Popen | None = None
        self.startup_s: float | None = None

    def start(self, timeout: float = STARTUP_TIMEOUT_S) -> VllmServer:
        started = time.monotonic()
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                self.command,
                cwd=ROOT,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.wait_ready(timeout, started)
        self.startup_s = time.monotonic() - started
        return self

    def wait_ready(self, timeout: float, started: float) -> None:
        """Ready means a real 1-token chat completion succeeds (/health answers before the engine can serve)."""
        last_error: Exception | None = None
        while time.monotonic() - started < timeout:
            if self.process.poll() is not None:
                raise VllmServerError(
                    f"vLLM exited with {self.process.returncode} before it was ready\n{self.log_tail()}"
                )
            try:
                self.chat("hi", max_tokens=1, timeout=10)
                return
            except (OSError, urllib.error.URLError, VllmServerError) as error:
                last_error = error
            time.sleep(0.5)
        self.stop()
        raise VllmServerError(f"vLLM not ready after {timeout:.0f}s (last error: {last_error})\n{self.log_tail()}")

    def request(self, method: str, path: str, body: dict | None = None, timeout: float = 60) -> tuple[int, str]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base_url + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    def post_json(self, path: str, body: dict, timeout: float = 60) -> dict:
        status, text = self.request("POST", path, body, timeout)
        if status != 200:
            raise VllmServerError(f"POST {path} -> {status}: {text[:500]}")
        return json.loads(text)

    def chat(self, content: str, *, max_tokens: int = 8, timeout: float = 60, **params) -> dict:
        body = {
            "model": SERVED_MODEL_NAME,
            "messages": [{"role": "user", "content": content}],
            "max_tokens": max_tokens,
            **params,
        }
        return self.post_json("/v1/chat/completions", body, timeout)

    def metrics(self) -> str:
        status, text = self.request("GET", "/metrics", timeout=30)
        if status != 200:
            raise VllmServerError(f"GET /metrics -> {status}")
        return text

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def _group_alive(self) -> bool:
        try:
            os.killpg(self.process.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM the server and wait; SIGKILL its process group if it or its engine processes linger."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        deadline = time.monotonic() + 10
        while self._group_alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        if self._group_alive():
            os.killpg(self.process.pid, signal.SIGKILL)
        return self.process.returncode


# The longest the vLLM environment may still take to install once the suite reaches a vLLM test (about 2 minutes on
# a 2-core machine; a wait, not a measurement).
VLLM_ENV_WAIT_S = 1200.0


def wait_for_vllm_env(status_file: Path, timeout_s: float = VLLM_ENV_WAIT_S) -> None:
    """Until `make vllm-env`, running beside the suite, has written its exit status; fail on a non-zero one."""
    deadline = time.monotonic() + timeout_s
    while not status_file.exists() or not status_file.read_text().strip():
        if time.monotonic() > deadline:
            pytest.fail(f"the vLLM environment was still installing after {timeout_s:.0f} s ({status_file})")
        time.sleep(1.0)
    status = status_file.read_text().strip()
    if status != "0":
        log = status_file.with_suffix(".log")
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:]) if log.exists() else "(no log)"
        pytest.fail(f"`make vllm-env` failed with exit status {status}; the end of {log}:\n{tail}")


@pytest.fixture(scope="session")
def vllm_python() -> Path:
    status_file = os.environ.get("VLLM_ENV_STATUS")
    if status_file and not (VLLM_VENV / ".installed").exists():
        wait_for_vllm_env(Path(status_file))
    if not VLLM_PYTHON.exists():
        pytest.skip(".venv-vllm is absent: `make vllm-env` builds the real vLLM CPU environment")
    return VLLM_PYTHON


def _ensure_model(python: Path, out_dir: Path, *extra: str) -> Path:
    """Generate (or find) the model; parallel workers take turns on a lock, so none reads a half-written one."""
    env = dict(os.environ, **VLLM_ENV)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    with open(out_dir.parent / ".generate.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        subprocess.run(
            [str(python), str(MAKE_TINY_MODEL), *extra, str(out_dir)],
            cwd=ROOT,
            env=env,
            check=True,
            capture_output=True,
            timeout=300,
        )
    return out_dir


@pytest.fixture(scope="session")
def tiny_model_dir(vllm_python) -> Path:
    return _ensure_model(vllm_python, MODELS_DIR / "tiny")


@pytest.fixture(scope="session")
def tiny_draft_model_dir(vllm_python) -> Path:
    """A smaller model with the same tokenizer, for --speculative-config draft_model tests."""
    return _ensure_model(vllm_python, MODELS_DIR / "tiny-draft", "--draft")


@pytest.fixture
def free_port() -> int:
    return get_free_port()


def _vllm_starter(vllm_python, tiny_model_dir, tmp_path_factory) -> Iterator:
    """start(args=(), *, model=None, env=None, defaults=True, timeout=...) -> a ready VllmServer; every server it
    started stops when the generator is closed."""
    servers: list[VllmServer] = []

    def start(
        args: Sequence[str] = (),
        *,
        model: Path | None = None,
        env: dict | None = None,
        defaults: bool = True,
        port: int | None = None,
        timeout: float = STARTUP_TIMEOUT_S,
    ) -> VllmServer:
        server_env = dict(os.environ, **VLLM_ENV, **(env or {}))
        log_path = tmp_path_factory.mktemp("vllm") / "server.log"
        server = VllmServer(
            vllm_python,
            model or tiny_model_dir,
            [*(DEFAULT_SERVER_ARGS if defaults else ()), *args],
            port=port or get_free_port(),
            log_path=log_path,
            env=server_env,
        )
        servers.append(server)
        return server.start(timeout)

    try:
        yield start
    finally:
        for server in servers:
            server.stop()


@pytest.fixture
def start_vllm(vllm_python, tiny_model_dir, tmp_path_factory) -> Iterator:
    """start_vllm(args=(), *, model=None, env=None, defaults=True, timeout=...) -> a ready VllmServer."""
    yield from _vllm_starter(vllm_python, tiny_model_dir, tmp_path_factory)


@pytest.fixture(scope="module")
def start_module_vllm(vllm_python, tiny_model_dir, tmp_path_factory) -> Iterator:
    """As start_vllm, for a server the tests of one module share (stopped after the module's last test)."""
    yield from _vllm_starter(vllm_python, tiny_model_dir, tmp_path_factory)


@pytest.fixture(scope="session")
def shared_vllm_agent(vllm_python, tiny_model_dir, tmp_path_factory) -> Iterator[SharedVllmAgent]:
    """The process's one agent on real vLLM, started by the first test that connects to it
    (tests/engine_node/vllm_node.py); stopped after the last test sharing it (tests/conftest.py) or at the end."""
    from tests.engine_node.vllm_node import shared_agent

    shared = shared_agent(vllm_python=vllm_python, model_dir=tiny_model_dir, tmp_path_factory=tmp_path_factory)
    try:
        yield shared
    finally:
        shared.stop()


DAPHNE_STOP_S = 3


@pytest.fixture
def vllm_node(shared_vllm_agent, sre, tmp_path) -> Iterator[VllmNode]:
    """This test's pool, node (holding the shared agent's token) and daphne on the agent's port; the daphne stops
    after the test, the agent lives on."""
    from tests.engine_node.vllm_node import make_node

    node = make_node(shared_vllm_agent, sre=sre, log_dir=tmp_path)
    try:
        yield node
    finally:
        # A connected agent can hold daphne's shut-down for its whole 10 s (an application instance that does not end
        # when cancelled); the test is over and its rows are flushed next, so it is not waited for that long.
        node.server.stop(timeout_s=DAPHNE_STOP_S)
