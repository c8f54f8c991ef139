"""A real daphne process serving controlplane.asgi on the test database, for browser and agent tests."""

import contextlib
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.conf import settings

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def subprocess_database_url() -> str:
    db = settings.DATABASES["default"]
    if db["ENGINE"] != "django.db.backends.postgresql":
        pytest.skip("live-server tests share the test database with daphne; set DATABASE_URL to Postgres")
    auth = db["USER"] + (f":{db['PASSWORD']}" if db.get("PASSWORD") else "")
    return f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


def wait_for_port(port: int, timeout_s: float, process: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            if process is not None and process.poll() is not None:
                raise RuntimeError(f"process exited with {process.returncode}") from None
            time.sleep(0.1)
    raise RuntimeError(f"nothing listens on {port} after {timeout_s}s")


class Daphne:
    """Start, stop and restart the control plane on a fixed port (agents keep its URL across restarts)."""

    def __init__(self, log_dir: Path, extra_env: dict | None = None, port: int | None = None):
        """`port`: a fixed one (an agent that outlives this server knows it), else a free one."""
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.ws_agent_url = f"ws://127.0.0.1:{self.port}/ws/agent/"
        self.log_path = log_dir / "daphne.log"
        self.env = {
            **os.environ,
            "DATABASE_URL": subprocess_database_url(),
            "CONTROLPLANE_VAR_DIR": str(log_dir),
            "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost",
            **(extra_env or {}),
        }
        self.env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        self.launch()
        self.wait_ready()

    def launch(self) -> None:
        """Start the process without waiting for it to listen (daphnes() starts several at once)."""
        out = open(self.log_path, "a")  # noqa: SIM115 - kept open for the process's life
        self.process = subprocess.Popen(
            [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(self.port), "controlplane.asgi:application"],
            cwd=ROOT,
            env=self.env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )

    def wait_ready(self) -> None:
        try:
            wait_for_port(self.port, 30, self.process)
        except RuntimeError:
            raise RuntimeError(f"daphne did not start: {self.log_path.read_text()[-3000:]}") from None

    def stop(self, timeout_s: float = 10) -> None:
        """SIGTERM, then SIGKILL after `timeout_s`."""
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None


@contextlib.contextmanager
def daphnes(log_dir: Path, count: int, prefix: str = "cp"):
    """`count` daphne processes on the same test database and Redis, as several ASGI processes behind a load balancer
    (each logging under log_dir/<prefix>-<i>); all started together and listening before the block, all stopped
    after it."""
    servers = []
    for i in range(count):
        (log_dir / f"{prefix}-{i}").mkdir()
        servers.append(Daphne(log_dir / f"{prefix}-{i}"))
    try:
        for server in servers:
            server.launch()
        for server in servers:
            server.wait_ready()
        yield servers
    finally:
        for server in servers:
            server.stop()
