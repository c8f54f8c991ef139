"""The engine as a supervised child process: vLLM's OpenAI server or the simulator, always on 127.0.0.1.

vLLM's /health only reads an error flag (it stayed 200 while the engine was wedged), so readiness and
liveness are real 1-token requests with a timeout. Shut-down is SIGTERM, then SIGKILL after a grace period; an agent
that dies without shutting down takes its engine with it (engine_node/lifetime.py).
"""

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import time
from collections import deque
from collections.abc import Callable

import aiohttp

from engine_node.engine_env import engine_environment
from engine_node.fragmentation import WORKER_EXTENSION, WORKER_EXTENSION_DIR
from engine_node.lifetime import tied_to_parent
from engine_node.policy.masking import mask
from engine_node.settings import AgentSettings

log = logging.getLogger("engine_node.engine")

LOG_LINES = 200
# A log line as it leaves the node (the node page, a failed start's message): masked, then cut to this. An engine
# that logs requests logs customers' words.
LOG_LINE_CHARS = 500
STOP_GRACE_S = 20.0
CRASH_BACKOFF_MAX_S = 30.0


class EngineStartFailed(Exception):
    """The engine exited or never served a request; the message carries its last log lines."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class EngineProcess:
    """Starts, probes, restarts and stops the engine; `on_state` hears "online", "degraded", "restarting"."""

    def __init__(self, settings: AgentSettings, on_state: Callable[[str], None]):
        self.settings = settings
        self.port = settings.engine_port or free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log_tail: deque[str] = deque(maxlen=LOG_LINES)
        self.args: list[str] = []
        self.version = ""
        self.crash_restarts = 0
        self._on_state = on_state
        self._process: asyncio.subprocess.Process | None = None
        self._expected_exit = False
        self._tasks: list[asyncio.Task] = []
        self._session: aiohttp.ClientSession | None = None

    @property
    def model_name(self) -> str:
        """The name requests must carry: the served name, else the model itself (vLLM's default)."""
        for prefix in ("--served-model-name=", "--model="):
            for arg in self.args:
                if arg.startswith(prefix):
                    return arg.removeprefix(prefix)
        return ""

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def command(self, args: list[str]) -> list[str]:
        address = ["--host=127.0.0.1", f"--port={self.port}"]
        if self.settings.backend == "vllm":
            # The worker extension measures fragmentation and releases cached blocks (engine_node/fragmentation.py).
            server = [self.settings.engine_python, "-m", "vllm.entrypoints.openai.api_server"]
            return [*server, *address, f"--worker-extension-cls={WORKER_EXTENSION}", *args]
        profile = [f"--profile={self.settings.simulator_profile}"] if self.settings.simulator_profile else []
        return [sys.executable, "-m", "engine_node.simulator", *address, *profile, *args]

    async def start(self, args: list[str]) -> None:
        """Spawn with these flags and return once a real request succeeds; raise EngineStartFailed otherwise."""
        self.args = list(args)
        env = {**engine_environment(os.environ, extra=self.settings.engine_env), "VLLM_SERVER_DEV_MODE": "1"}
        if self.settings.backend == "vllm":
            # Only the extension's own directory: the vLLM interpreter need not have engine_node installed.
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(WORKER_EXTENSION_DIR), env.get("PYTHONPATH")]))
        self._expected_exit = False
        self.log_tail.append(f"[agent] starting {self.settings.backend}: {' '.join(self.command(args))}")
        # Tied to the agent: if the agent dies, even by SIGKILL, the engine gets SIGTERM instead of living on alone
        # in its own session (it has one so that a Ctrl-C meant for the agent does not reach it first).
        self._process = await asyncio.create_subprocess_exec(
            *tied_to_parent(self.command(args)),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        self._tasks = [asyncio.create_task(self._read_output(self._process))]
        await self._wait_ready(self._process)
        self.version = await self._engine_version()
        self._tasks.append(asyncio.create_task(self._watch(self._process)))
        self._tasks.append(asyncio.create_task(self._probe_forever(self._process)))

    async def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        self._expected_exit = True
        for task in self._tasks[1:]:
            task.cancel()
        process = self._process
        if process is None or process.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), grace_s)
        except TimeoutError:
            self.log_tail.append(f"[agent] engine ignored SIGTERM for {grace_s:.0f}s; SIGKILL")
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            await process.wait()

    async def close(self) -> None:
        await self.stop()
        if self._session is not None:
            await self._session.close()

    async def probe(self, timeout_s: float) -> bool:
        """One real generated token within the timeout."""
        body = {"model": self.model_name, "prompt": "ping", "max_tokens": 1}
        try:
            async with self._http().post(
                f"{self.base_url}/v1/completions", json=body, timeout=aiohttp.ClientTimeout(total=timeout_s)
            ) as response:
                return response.status == 200
        except (aiohttp.ClientError, TimeoutError):
            return False

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
        return self._session

    async def _wait_ready(self, process: asyncio.subprocess.Process) -> None:
        deadline = time.monotonic() + self.settings.start_timeout_s
        while time.monotonic() < deadline:
            if process.returncode is not None:
                break
            if await self.probe(timeout_s=min(self.settings.probe_timeout_s, 5.0)):
                self.log_tail.append("[agent] engine serves requests")
                return
            await asyncio.sleep(0.2)
        if process.returncode is None:
            await self.stop(grace_s=5)
            reason = f"did not serve a request within {self.settings.start_timeout_s:.0f}s"
        else:
            await asyncio.sleep(0.1)  # let the reader collect the last lines
            reason = f"exited with code {process.returncode}"
        raise EngineStartFailed(f"engine {reason}: {self.last_error()}")

    def last_error(self) -> str:
        """The most telling log line, masked: the last one naming an error, else the last line."""
        lines = [line for line in self.log_tail if not line.startswith("[agent]")]
        for line in reversed(lines):
            if "Error" in line or "error:" in line:
                return mask(line.strip(), limit=LOG_LINE_CHARS)
        return mask(lines[-1].strip(), limit=LOG_LINE_CHARS) if lines else "no output"

    async def _engine_version(self) -> str:
        try:
            async with self._http().get(f"{self.base_url}/version", timeout=aiohttp.ClientTimeout(total=5)) as r:
                return str((await r.json()).get("version", ""))
        except (aiohttp.ClientError, TimeoutError, ValueError):
            return ""

    async def _read_output(self, process: asyncio.subprocess.Process) -> None:
        assert process.stdout is not None
        async for raw in process.stdout:
            self.log_tail.append(raw.decode("utf-8", "replace").rstrip())

    async def _watch(self, process: asyncio.subprocess.Process) -> None:
        """Restart an engine that died on its own, with exponential backoff; report degraded until it serves."""
        code = await process.wait()
        if self._expected_exit:
            return
        self.log_tail.append(f"[agent] engine exited unexpectedly with code {code}; restarting")
        self._on_state("degraded")
        delay = 1.0
        while not self._expected_exit:
            self.crash_restarts += 1
            try:
                await self.start(self.args)
            except EngineStartFailed as exc:
                self.log_tail.append(f"[agent] restart failed: {exc}; next try in {delay:.0f}s")
                await asyncio.sleep(delay)
                delay = min(delay * 2, CRASH_BACKOFF_MAX_S)
                continue
            self._on_state("online")
            return

    async def _probe_forever(self, process: asyncio.subprocess.Process) -> None:
        """A wedged engine keeps its process and its /health; two failed real requests in a row kill it."""
        failures = 0
        while process.returncode is None:
            await asyncio.sleep(self.settings.probe_interval_s)
            if await self.probe(self.settings.probe_timeout_s):
                failures = 0
                continue
            failures += 1
            if failures >= 2 and process.returncode is None:
                self.log_tail.append("[agent] engine failed two liveness probes; killing it to restart")
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                return
