"""The agent's 1 Hz metric sample: gateway request figures, admission batches, the engine's /metrics, the GPU.

`Telemetry.collect()` scrapes the engine and builds one `{"type": "sample", "t", "window_s", "m"}` message; every
key of `m` is always present (None when unknown). The agent sends it over the control link only while connected
and never queues it. Keys and their definitions: SAMPLE_KEYS below, requests.py (request and batch windows),
engine_scrape.py (engine and GPU figures: `gpu_memory_used` from nvidia-smi, or the simulator's simulated
`gpu_util` and `gpu_memory_used`), memory.py (fragmentation on vLLM), gpu.py (GPU figures); `batch_timeout_rate` is
the window's share of requests whose batch timeout was exceeded (engine_node/batching.py, OVERDUE_TIMEOUTS); queue
depths are instant, batch efficiency and idle ratio are the admission gate's own window figures
(engine_node/admission.py), `degraded` is the pool's degradation state in the policy bundle and `engine_restarts`
counts the engine restarts since the agent started (planned and crash). `absent` maps each of SOURCED_FIGURES that is
null to why (no source on this node, no reading yet, ...): such a null means "cannot be measured here", never
"healthy"; the control plane shows the reason and its alerts say "no source" (controlplane/alerts/coverage.py).
"""

import math
import time
from collections.abc import Callable

from engine_node.telemetry.engine_scrape import EngineScraper, parse_engine_metrics
from engine_node.telemetry.gpu import GpuUtilisation, SmActivity
from engine_node.telemetry.requests import BatchLog, RequestLog

__all__ = [
    "SAMPLE_KEYS",
    "SOURCED_FIGURES",
    "WINDOW_S",
    "BatchLog",
    "EngineScraper",
    "GpuUtilisation",
    "RequestLog",
    "SmActivity",
    "Telemetry",
    "parse_engine_metrics",
]

WINDOW_S = 10
SAMPLE_KEYS = (
    "qps", "latency_p50_s", "latency_p99_s", "latency_p999_s", "ttft_p50_s", "ttft_p99_s", "error_rate",
    "rejected_rate", "requests_running", "requests_waiting", "kv_cache_usage", "queue_depth_short",
    "queue_depth_long", "batch_size_mean", "batch_size_hist", "batch_efficiency", "batch_idle_ratio",
    "spec_acceptance_rate", "spec_rejection_rate", "fragmentation_ratio", "gpu_util", "sm_util", "length_hist",
    "long_request_share", "intents", "tiers", "intent_classified", "intent_below_floor_share",
    "intent_confidence_hist", "degraded", "engine_restarts", "gpu_memory_used", "batch_timeout_rate",
    "absent",
)  # fmt: skip
# Figures read from a source the node may not have (a GPU, an allocator, a DCGM exporter).
SOURCED_FIGURES = ("fragmentation_ratio", "gpu_util", "sm_util")
NO_GPU_UTIL = "no NVIDIA GPU on this host"


def _finite(value: float | None) -> float | None:
    return None if value is None or math.isnan(value) else value


class Telemetry:
    """Builds samples from the request and batch logs, the admission gate, the engine scraper and the GPU reader."""

    def __init__(
        self,
        *,
        requests: RequestLog,
        batches: BatchLog,
        admission,
        scraper: EngineScraper,
        gpu: GpuUtilisation | None,
        sm: SmActivity,
        fragmentation: Callable[[], tuple[float | None, str | None]] | None,
        degraded: Callable[[], bool],
        engine_restarts: Callable[[], int],
        wall=time.time,
        window_s: float = WINDOW_S,
    ):
        self.requests = requests
        self.batches = batches
        self.admission = admission
        self.scraper = scraper
        self.gpu = gpu
        self.sm = sm
        # (value, why absent) from the worker extension (memory.fragmentation_figure); None where the figure is
        # the engine's own /metrics series (the simulator's).
        self._fragmentation = fragmentation
        self._degraded = degraded
        self._engine_restarts = engine_restarts
        self._wall = wall
        self.window_s = window_s
        self.last: dict | None = None

    async def collect(self) -> dict:
        """Scrape the engine (a failure leaves its figures None) and build the sample; kept as `last`."""
        await self.scraper.scrape()
        self.last = self.build_sample()
        return self.last

    def build_sample(self, now: float | None = None) -> dict:
        """The sample from what is known now; `now` is on the logs' monotonic clock (default: theirs)."""
        admission = self.admission
        engine = self.scraper.figures(now)
        if self._fragmentation is not None:
            engine["fragmentation_ratio"], fragmentation_reason = self._fragmentation()
        else:
            answered = self.scraper.latest is not None
            fragmentation_reason = (
                "the engine's /metrics has no fragmentation series"
                if answered
                else "the engine's /metrics did not answer"
            )
        reasons = {
            "fragmentation_ratio": fragmentation_reason,
            "gpu_util": self.gpu.reason() if self.gpu is not None else NO_GPU_UTIL,
            "sm_util": self.sm.reason(),
        }
        gpu_util = gpu_memory_used = None
        if self.gpu is not None:
            gpu_util, gpu_memory_used = self.gpu.value(), self.gpu.memory_used()
        if gpu_util is None and gpu_memory_used is None:
            gpu_util, gpu_memory_used = self.scraper.simulated_gpu()
        m = {
            **self.requests.stats(now),
            **engine,
            "queue_depth_short": admission.queue_depth("short"),
            "queue_depth_long": admission.queue_depth("long"),
            **self.batches.stats(now),
            "batch_efficiency": _finite(admission.efficiency()),
            "batch_idle_ratio": _finite(admission.idle_ratio()),
            "gpu_util": gpu_util,
            "gpu_memory_used": gpu_memory_used,
            "sm_util": self.sm.value(),
            "degraded": 1 if self._degraded() else 0,
            "engine_restarts": int(self._engine_restarts()),
        }
        m["absent"] = {key: reasons[key] or "no reading" for key in SOURCED_FIGURES if m[key] is None}
        figures = {key: m[key] for key in SAMPLE_KEYS}
        return {"type": "sample", "t": self._wall(), "window_s": self.window_s, "m": figures}

    async def close(self) -> None:
        await self.scraper.close()
        if self.gpu is not None:
            await self.gpu.close()
        await self.sm.close()
