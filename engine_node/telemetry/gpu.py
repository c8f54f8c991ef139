"""The sample's GPU figures: utilisation from NVML, SM activity from a DCGM exporter, and why either is absent.

`gpu_util` is NVML's `utilization.gpu`, averaged over the GPUs the engine uses (gpu_devices.py says which: its
workers' own devices, else CUDA_VISIBLE_DEVICES, else the host's only GPU; null with the reason while unknown): the
share of time *any* kernel ran, which a single small kernel keeps at 100 %. GPU memory used is `memory.used /
memory.total` of the same GPUs together (the leak detector's second input); a MIG instance's is its workers'
reading, and it has no utilisation. `devices()` lists each GPU's own figures. Both come from one long-running
`nvidia-smi --query-gpu=... -l 1` (NVML's own command-line front end; no process spawn per sample), utilisation
also from an injected reader (`read`), which stands in for the driver where there is none.

`sm_util` is SM activity, the share of time the streaming multiprocessors had work: only DCGM's profiling field
`DCGM_FI_PROF_SM_ACTIVE` measures it. With `--dcgm-exporter-url` the agent scrapes that exporter every
DCGM_SCRAPE_S (dcgm-exporter itself refreshes every 30 s by default; scraping faster only re-reads the same
figure) and keeps the mean over the host's GPUs. Without one the figure is null with the reason: NVML has no SM
activity, and passing utilization.gpu off as it would overstate how busy the GPU is.
"""

import asyncio
import contextlib
import logging
import math
import os
import shutil
import signal
import time
from collections.abc import Callable

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from engine_node.telemetry.gpu_devices import EngineDevices

log = logging.getLogger("engine_node.telemetry")

SM_ACTIVE = "DCGM_FI_PROF_SM_ACTIVE"
GPU_STALE_S = 5.0
GPU_RESTART_S = 10.0
NVML_PERIOD_S = 1.0
DCGM_SCRAPE_S = 5.0
# A DCGM reading older than this (three of the exporter's default 30 s refreshes) is no longer shown.
DCGM_STALE_S = 90.0
DCGM_TIMEOUT_S = 2.0

NO_GPU = "no NVIDIA GPU on this host"
NO_NVML_YET = "no utilization.gpu reading from NVML (nvidia-smi) in the last few seconds"
NO_DCGM = (
    "no DCGM exporter configured (--dcgm-exporter-url): NVML reports utilization.gpu (shown as GPU utilisation), "
    "which is not SM activity"
)


def parse_utilisation(line: str) -> tuple[int, float, tuple[float, float] | None] | None:
    """`index, utilization.gpu, memory.used, memory.total` as nvidia-smi prints them with nounits: (index,
    utilisation, (used MiB, total MiB) or None where memory is "[N/A]"); None for an unknown utilisation or a
    malformed line."""
    fields = [field.strip() for field in line.split(",")]
    if len(fields) not in (2, 4):
        return None
    try:
        index, util = int(fields[0]), float(fields[1]) / 100.0
    except ValueError:
        return None
    memory = None
    if len(fields) == 4:
        try:
            used, total = float(fields[2]), float(fields[3])
        except ValueError:
            used = total = 0.0
        if total > 0 and used >= 0:
            memory = (used, total)
    return index, util, memory


def parse_sm_active(text: str) -> list[float]:
    """The DCGM_FI_PROF_SM_ACTIVE values (0..1, one per GPU or GPU instance) of a Prometheus exposition."""
    prefixes = (SM_ACTIVE, f"# HELP {SM_ACTIVE}", f"# TYPE {SM_ACTIVE}")
    lines = "\n".join(line for line in text.splitlines() if line.startswith(prefixes)) + "\n"
    values = []
    for family in text_string_to_metric_families(lines):
        for sample in family.samples:
            if sample.name == SM_ACTIVE and math.isfinite(sample.value):
                values.append(min(1.0, max(0.0, sample.value)))
    return values


class GpuUtilisation:
    """The mean utilization.gpu over the engine's GPUs, from a long-running nvidia-smi (restarted if it dies) or from
    `read`, a callable polled every second that returns {gpu index: utilisation 0..1}. `devices` says which GPUs
    are the engine's (gpu_devices.resolve_devices); without it, every GPU the readings name."""

    def __init__(
        self,
        *,
        read: Callable[[], dict[int, float]] | None = None,
        clock=time.monotonic,
        devices: Callable[[], EngineDevices] | None = None,
    ):
        self._read = read
        self._clock = clock
        self._devices = devices
        self._latest: dict[int, tuple[float, float]] = {}
        self._memory: dict[int, tuple[float, float, float]] = {}
        self._task: asyncio.Task | None = None
        self._process: asyncio.subprocess.Process | None = None

    def start(self) -> None:
        if self._task is not None:
            return
        if self._read is not None:
            self._task = asyncio.create_task(self._poll())
        elif shutil.which("nvidia-smi"):
            self._task = asyncio.create_task(self._run())

    def _engine_devices(self) -> EngineDevices | None:
        return self._devices() if self._devices is not None else None

    def _wanted(self, index: int, engine: EngineDevices | None) -> bool:
        return engine is None or index in engine.indices

    def value(self) -> float | None:
        engine = self._engine_devices()
        horizon = self._clock() - GPU_STALE_S
        fresh = [util for i, (at, util) in self._latest.items() if at >= horizon and self._wanted(i, engine)]
        return math.fsum(fresh) / len(fresh) if fresh else None

    def memory_used(self) -> float | None:
        """Memory used over memory total of the engine's GPUs with a fresh reading, a MIG instance's from its
        workers (the leak detector's second input); None when there is none."""
        engine = self._engine_devices()
        horizon = self._clock() - GPU_STALE_S
        fresh = [(u, t) for i, (at, u, t) in self._memory.items() if at >= horizon and self._wanted(i, engine)]
        for instance in engine.mig if engine is not None else ():
            total, free = instance.get("device_total_bytes"), instance.get("device_free_bytes")
            if isinstance(total, int) and isinstance(free, int) and total > 0:
                fresh.append((float(total - free), float(total)))
        total = math.fsum(t for _, t in fresh)
        return math.fsum(u for u, _ in fresh) / total if total > 0 else None

    def reason(self) -> str | None:
        """Why value() is None, or None when it is not."""
        if self.value() is not None:
            return None
        engine = self._engine_devices()
        if engine is not None and not engine.indices:
            return engine.reason
        return NO_NVML_YET

    def devices(self) -> list[dict]:
        """Each of the engine's GPUs with its own figures: NVML index, utilisation and memory used (0..1, None when
        unknown), and its MIG instances; what /healthz shows."""
        engine = self._engine_devices()
        horizon = self._clock() - GPU_STALE_S
        indices = sorted(engine.indices if engine is not None else set(self._latest) | set(self._memory))
        rows = []
        for index in indices:
            util = self._latest.get(index)
            memory = self._memory.get(index)
            rows.append(
                {
                    "index": index,
                    "gpu_util": util[1] if util and util[0] >= horizon else None,
                    "gpu_memory_used": memory[1] / memory[2] if memory and memory[0] >= horizon else None,
                }
            )
        for instance in engine.mig if engine is not None else ():
            total, free = instance.get("device_total_bytes"), instance.get("device_free_bytes")
            used = (total - free) / total if isinstance(total, int) and isinstance(free, int) and total else None
            rows.append({"uuid": instance.get("device_uuid"), "mig": True, "gpu_util": None, "gpu_memory_used": used})
        return rows

    def feed(self, line: str) -> None:
        parsed = parse_utilisation(line)
        if parsed is not None:
            index, util, memory = parsed
            at = self._clock()
            self._latest[index] = (at, util)
            if memory is not None:
                self._memory[index] = (at, *memory)

    async def _poll(self) -> None:
        assert self._read is not None
        while True:
            try:
                readings = await asyncio.to_thread(self._read)
                now = self._clock()
                for index, util in readings.items():
                    if isinstance(util, int | float) and math.isfinite(util):
                        self._latest[int(index)] = (now, min(1.0, max(0.0, float(util))))
            except Exception as exc:  # a driver error leaves the figure to go stale, with its reason
                log.warning("NVML reading failed: %r", exc)
            await asyncio.sleep(NVML_PERIOD_S)

    async def _run(self) -> None:
        query = [
            "--query-gpu=index,utilization.gpu,memory.used,memory.total",
            "--format=csv,noheader,nounits",
            "-l",
            "1",
        ]
        while True:
            try:
                self._process = await asyncio.create_subprocess_exec(
                    "nvidia-smi",
                    *query,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.DEVNULL,
                    start_new_session=True,  # its own process group, killed whole on close
                )
                assert self._process.stdout is not None
                async for raw in self._process.stdout:
                    self.feed(raw.decode("ascii", "replace"))
                await self._process.wait()
                log.warning(
                    "nvidia-smi exited with %s; restarting it in %.0fs", self._process.returncode, GPU_RESTART_S
                )
            except OSError as exc:
                log.warning("nvidia-smi failed to start: %s", exc)
            await asyncio.sleep(GPU_RESTART_S)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._process is not None and self._process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._process.pid, signal.SIGKILL)
            await self._process.wait()


class SmActivity:
    """SM activity from a DCGM exporter's DCGM_FI_PROF_SM_ACTIVE, or None with the reason (see the module)."""

    def __init__(self, url: str = "", *, has_gpu: bool, clock=time.monotonic):
        self.url = url
        self.has_gpu = has_gpu
        self._clock = clock
        self._value: float | None = None
        self._read_at: float | None = None
        self._problem = "no answer from the DCGM exporter yet"
        self._task: asyncio.Task | None = None
        self._session: aiohttp.ClientSession | None = None

    def start(self) -> None:
        if self.url and self._task is None:
            self._task = asyncio.create_task(self._run())

    def value(self) -> float | None:
        if self._read_at is None or self._clock() - self._read_at > DCGM_STALE_S:
            return None
        return self._value

    def reason(self) -> str | None:
        """Why value() is None, or None when it is not."""
        if self.value() is not None:
            return None
        if self.url:
            return f"DCGM exporter {self.url}: {self._problem}"
        return NO_DCGM if self.has_gpu else NO_GPU

    async def scrape(self) -> None:
        """One read of the exporter: the mean SM activity over its GPUs, or the problem kept for the reason."""
        try:
            if self._session is None or self._session.closed:
                self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=DCGM_TIMEOUT_S))
            async with self._session.get(self.url) as response:
                if response.status != 200:
                    self._problem = f"HTTP {response.status}"
                    return
                values = parse_sm_active(await response.text())
        except (aiohttp.ClientError, TimeoutError, ValueError, UnicodeDecodeError) as exc:
            self._problem = f"unreachable ({type(exc).__name__})"
            return
        if not values:
            self._problem = f"no {SM_ACTIVE} series (DCGM profiling metrics are off in the exporter's counters)"
            return
        self._value, self._read_at = math.fsum(values) / len(values), self._clock()

    async def _run(self) -> None:
        while True:
            await self.scrape()
            await asyncio.sleep(DCGM_SCRAPE_S)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._session is not None:
            await self._session.close()
