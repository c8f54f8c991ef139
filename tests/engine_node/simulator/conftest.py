"""Fixtures for the simulator tests: real `python -m engine_node.simulator` processes on free ports.

- start_simulator(profile=None, args=(), env=None): a running simulator whose profile is FAST_PROFILE
  with `profile` laid over it; every one started is stopped at teardown.
- simulator: one shared simulator for tests that only read or add requests (module scope).
- run_simulator(args, profile=None, env=None): runs the CLI to completion, for start-up checks.
"""

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[3]
# Steps ~50x faster than the default GPU profile; replies of 4..40 tokens.
FAST_PROFILE = {
    "latency": {"time_scale": 0.02},
    "reply_length": {"median": 12, "sigma": 0.5, "min": 4, "max": 40},
}
READY_TIMEOUT_S = 20.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _merged(base: dict, override: dict) -> dict:
    merged = dict(base)
    for key, value in override.items():
        merged[key] = _merged(merged[key], value) if isinstance(value, dict) and key in merged else value
    return merged


def write_profile(directory: Path, profile: dict | None) -> Path:
    path = directory / f"profile-{time.monotonic_ns()}.yaml"
    path.write_text(yaml.safe_dump(_merged(FAST_PROFILE, profile or {})), encoding="utf-8")
    return path


class HttpResult:
    """Status, headers and body of one HTTP exchange; `json` parses the body."""

    def __init__(self, status: int, headers: dict, body: bytes):
        self.status = status
        self.headers = headers
        self.body = body

    @property
    def json(self):
        return json.loads(self.body)


class Simulator:
    """One simulator process and a small HTTP client for it."""

    def __init__(self, workdir: Path, profile: dict | None, args: tuple, env: dict | None):
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / f"simulator-{self.port}.log"
        command = [sys.executable, "-m", "engine_node.simulator", "--host", "127.0.0.1", "--port", str(self.port)]
        self.profile_path = write_profile(workdir, profile)
        command += ["--profile", str(self.profile_path), *args]
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                command, cwd=ROOT, env={**os.environ, **(env or {})}, stdout=log, stderr=subprocess.STDOUT
            )

    def wait_ready(self) -> "Simulator":
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"simulator exited with {self.process.returncode}:\n{self.log()}")
            try:
                self.request("GET", "/version", timeout=1)
                return self
            except OSError:
                time.sleep(0.05)
        raise AssertionError(f"simulator not listening after {READY_TIMEOUT_S}s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def request(self, method: str, path: str, body: object = None, timeout: float = 10) -> HttpResult:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return HttpResult(response.status, dict(response.headers), response.read())
        except urllib.error.HTTPError as error:
            return HttpResult(error.code, dict(error.headers), error.read())

    def get(self, path: str, timeout: float = 10) -> HttpResult:
        return self.request("GET", path, timeout=timeout)

    def post(self, path: str, body: object = None, timeout: float = 10) -> HttpResult:
        return self.request("POST", path, {} if body is None else body, timeout=timeout)

    def chat(self, content: str, timeout: float = 10, **fields) -> HttpResult:
        return self.post(
            "/v1/chat/completions", {"messages": [{"role": "user", "content": content}], **fields}, timeout
        )

    def chat_many(self, bodies: list[dict], timeout: float = 30) -> list[HttpResult]:
        """Send chat requests concurrently, one thread each; results in the order of `bodies`."""
        with ThreadPoolExecutor(len(bodies)) as pool:
            return list(pool.map(lambda body: self.post("/v1/chat/completions", body, timeout), bodies))

    def stream(self, path: str, body: dict) -> tuple[HttpResult, list[str]]:
        """POST a streaming request; the data payloads of its SSE events, in order."""
        result = self.post(path, {**body, "stream": True})
        text = result.body.decode("utf-8")
        assert text.endswith("\n\n"), text[-200:]
        events = [event for event in text.split("\n\n") if event]
        assert all(event.startswith("data: ") for event in events), events
        return result, [event.removeprefix("data: ") for event in events]

    def metrics(self) -> dict[tuple[str, frozenset], float]:
        """Every sample of /metrics keyed by (sample name, labels)."""
        text = self.get("/metrics").body.decode("utf-8")
        return {
            (sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
        }

    def metric(self, name: str, **labels: str) -> float:
        """The sum of the samples called `name` whose labels include `labels`."""
        wanted = set(labels.items())
        values = [
            value
            for (sample, sample_labels), value in self.metrics().items()
            if sample == name and wanted <= sample_labels
        ]
        assert values, f"no sample {name} {labels}"
        return sum(values)

    def state(self) -> dict:
        return self.get("/sim/state").json


def chat_body(content: str, **fields) -> dict:
    return {"messages": [{"role": "user", "content": content}], **fields}


@pytest.fixture
def start_simulator(tmp_path: Path) -> Iterator:
    started: list[Simulator] = []

    def start(profile: dict | None = None, args: tuple = (), env: dict | None = None) -> Simulator:
        simulator = Simulator(tmp_path, profile, args, env)
        started.append(simulator)
        return simulator.wait_ready()

    yield start
    for simulator in started:
        simulator.stop()


@pytest.fixture(scope="module")
def simulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulator]:
    shared = Simulator(
        tmp_path_factory.mktemp("simulator"), None, ("--served-model-name", "chat", "--max-model-len", "4096"), None
    )
    try:
        yield shared.wait_ready()
    finally:
        shared.stop()


@pytest.fixture
def run_simulator(tmp_path: Path):
    def run(args: tuple = (), profile: dict | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "engine_node.simulator", "--port", str(_free_port())]
        command += ["--profile", str(write_profile(tmp_path, profile)), *args]
        return subprocess.run(
            command, cwd=ROOT, env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=20
        )

    return run
