"""What the sample reads from the engine's /metrics (vLLM 0.32 or the simulator).

The engine's exposition is fetched once per sample from 127.0.0.1 with a short timeout. Only the lines of the
families the sample uses are handed to prometheus_client's parser (vLLM's full exposition is ~600 lines; parsing
all of it every second would cost the event loop milliseconds). Spec-decode acceptance is a ratio of counter deltas
over the sample window (vllm:spec_decode_num_accepted_tokens_total / vllm:spec_decode_num_draft_tokens_total, the
definition in vllm/v1/spec_decode/metrics.py); a counter that goes down (engine restarted) starts the window anew.
A failed scrape leaves every engine figure None.

The simulator's `sim:memory_fragmentation_ratio` is its (simulated) fragmentation; vLLM exports no such series, so
on vLLM the figure comes from the worker extension instead (telemetry/memory.py). GPU figures: telemetry/gpu.py; on
the simulator, which has no GPU, GPU utilisation and memory used come from its own `sim:gpu_utilization_ratio` and
`sim:gpu_memory_used_ratio` (simulated, like everything it reports).
"""

import collections
import logging
import math
import time

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

log = logging.getLogger("engine_node.telemetry")

RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
KV_USAGE = "vllm:kv_cache_usage_perc"
FRAGMENTATION = "sim:memory_fragmentation_ratio"
SIM_GPU_UTIL = "sim:gpu_utilization_ratio"
SIM_GPU_MEMORY_USED = "sim:gpu_memory_used_ratio"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED_TOKENS = "vllm:spec_decode_num_accepted_tokens_total"
# Per-request decode speed for the speculative-decoding rule (engine_node/speculation.py): only the histogram's
# _sum and _count lines are parsed (untyped then), not its buckets.
TPOT = "vllm:request_time_per_output_token_seconds"
# Families whose lines are parsed; a prefix match also keeps e.g. _by_reason and _per_pos, dropped after parsing.
FAMILIES = (RUNNING, WAITING, KV_USAGE, FRAGMENTATION, "vllm:spec_decode_num_draft_tokens",
            "vllm:spec_decode_num_accepted_tokens", SIM_GPU_UTIL, SIM_GPU_MEMORY_USED, TPOT + "_sum",
            TPOT + "_count")  # fmt: skip
_PREFIXES = tuple(prefix + name for name in FAMILIES for prefix in ("", "# HELP ", "# TYPE "))
SCRAPE_TIMEOUT_S = 0.8


def wanted_lines(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if line.startswith(_PREFIXES)) + "\n"


def parse_engine_metrics(text: str) -> dict:
    """Sums (means for ratios) over the engine's label sets of the series the sample uses; absent ones are None."""
    found: dict[str, list[float]] = {}
    for family in text_string_to_metric_families(wanted_lines(text)):
        for sample in family.samples:
            if not math.isnan(sample.value):
                found.setdefault(sample.name, []).append(sample.value)

    def total(name: str) -> float | None:
        return math.fsum(found[name]) if name in found else None

    def mean(name: str) -> float | None:
        return math.fsum(found[name]) / len(found[name]) if name in found else None

    return {
        "requests_running": total(RUNNING),
        "requests_waiting": total(WAITING),
        "kv_cache_usage": mean(KV_USAGE),
        "fragmentation_ratio": mean(FRAGMENTATION),
        "draft_tokens": total(DRAFT_TOKENS),
        "accepted_tokens": total(ACCEPTED_TOKENS),
        "sim_gpu_util": mean(SIM_GPU_UTIL),
        "sim_gpu_memory_used": mean(SIM_GPU_MEMORY_USED),
        "tpot_sum": total(TPOT + "_sum"),
        "tpot_count": total(TPOT + "_count"),
    }


class EngineScraper:
    """Scrapes the engine once per sample and keeps the spec-decode counters of the last window."""

    def __init__(self, base_url, *, window_s: float = 10.0, clock=time.monotonic, timeout_s: float = SCRAPE_TIMEOUT_S):
        self._base_url = base_url  # a callable: the engine's port changes across restarts
        self.window_s = window_s
        self._clock = clock
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session: aiohttp.ClientSession | None = None
        self._spec: collections.deque[tuple[float, float, float]] = collections.deque(maxlen=1024)
        self.latest: dict | None = None
        self.failures = 0

    async def scrape(self) -> dict | None:
        """Fetch and parse /metrics; None (and every engine figure None) when the engine does not answer."""
        try:
            if self._session is None or self._session.closed:
                self._session = aiohttp.ClientSession(timeout=self._timeout)
            async with self._session.get(f"{self._base_url()}/metrics") as response:
                if response.status != 200:
                    raise aiohttp.ClientResponseError(response.request_info, (), status=response.status)
                text = await response.text()
            figures = parse_engine_metrics(text)
        except (aiohttp.ClientError, TimeoutError, ValueError, UnicodeDecodeError) as exc:
            self.failures += 1
            log.debug("engine /metrics scrape failed: %r", exc)
            self.latest = None
            return None
        self.observe(figures)
        return figures

    def observe(self, figures: dict, now: float | None = None) -> None:
        """Take a parsed scrape as the latest and remember its spec-decode counters for the window."""
        self.latest = figures
        drafted, accepted = figures["draft_tokens"], figures["accepted_tokens"]
        if drafted is None or accepted is None:
            self._spec.clear()
            return
        if self._spec and (drafted < self._spec[-1][1] or accepted < self._spec[-1][2]):
            self._spec.clear()  # the counters went back: a new engine process
        self._spec.append((self._clock() if now is None else now, drafted, accepted))

    def spec_rates(self, now: float | None = None) -> tuple[float | None, float | None]:
        """(acceptance, rejection) of the draft tokens verified in the window; None when none were."""
        if self.latest is None or len(self._spec) < 2:
            return None, None
        now = self._clock() if now is None else now
        while len(self._spec) > 2 and self._spec[1][0] <= now - self.window_s:
            self._spec.popleft()  # keep one point at or before the window's start as the baseline
        _, drafted_then, accepted_then = self._spec[0]
        _, drafted, accepted = self._spec[-1]
        verified = drafted - drafted_then
        if verified <= 0:
            return None, None
        acceptance = min(1.0, max(0.0, (accepted - accepted_then) / verified))
        return acceptance, 1.0 - acceptance

    def figures(self, now: float | None = None) -> dict:
        """The sample's engine keys from the latest scrape."""
        latest = self.latest or {}
        acceptance, rejection = self.spec_rates(now)
        return {
            "requests_running": latest.get("requests_running"),
            "requests_waiting": latest.get("requests_waiting"),
            "kv_cache_usage": latest.get("kv_cache_usage"),
            "spec_acceptance_rate": acceptance,
            "spec_rejection_rate": rejection,
            "fragmentation_ratio": latest.get("fragmentation_ratio"),
        }

    def simulated_gpu(self) -> tuple[float | None, float | None]:
        """(GPU utilisation, GPU memory used) the simulator reports for its pretend GPU; None on real vLLM."""
        latest = self.latest or {}
        return latest.get("sim_gpu_util"), latest.get("sim_gpu_memory_used")

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
