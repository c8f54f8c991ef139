"""The simulated GPU's utilisation and memory used, and the `memory_leak_mb_per_s` fault that makes both drift.

The simulator has no GPU; these figures are simulated and exported as such (`sim:gpu_utilization_ratio`,
`sim:gpu_memory_used_ratio`, HELP text ending in "(simulated)") for the agent to report where a real host reads
nvidia-smi.

- Memory: the pretend GPU's memory is the profile's `kv_cache_bytes`, of which vLLM reserves
  `--gpu-memory-utilization` at start (a flat line, as on a real GPU). Leaked bytes come on top, up to the whole
  memory. A leak is released only when the memory is allocated from scratch again (`/sleep` + `/wake_up`) or the
  process restarts, which is what the product's drained restart and cleanup do.
- Utilisation: the share of the last UTIL_WINDOW_S in which the step loop computed. Under a leak each step also
  waits on the allocator for STALL_PER_PRESSURE x its compute time x the share of the headroom (memory above the
  reservation) the leak has taken, the GPU idle meanwhile: at a steady load that keeps the engine busy, the
  utilisation falls while memory used creeps up (the seed's fault case 2, 显存泄漏).
"""

import collections
import time
from collections.abc import Callable

UTIL_WINDOW_S = 1.0  # nvidia-smi's utilization.gpu is a sample period of at most a second
STALL_PER_PRESSURE = 3.0
MIB = 1024 * 1024


class SimulatedGpu:
    """Compute time of recent steps, and the leaked bytes accumulated at the fault's rate."""

    def __init__(
        self,
        *,
        total_bytes: int,
        reserved_share: float,
        leak_mb_per_s: Callable[[], float],
        clock=time.monotonic,
    ) -> None:
        self.total_bytes = total_bytes
        self.reserved_share = reserved_share
        self._leak_mb_per_s = leak_mb_per_s
        self._clock = clock
        self._steps: collections.deque[tuple[float, float]] = collections.deque(maxlen=100_000)
        self.leaked_bytes = 0.0
        self._leak_at = clock()

    def note_compute(self, end: float, compute_s: float) -> None:
        """A step computed for `compute_s` seconds up to `end`."""
        self._steps.append((end, compute_s))

    def utilization(self, now: float | None = None) -> float:
        now = self._clock() if now is None else now
        start = now - UTIL_WINDOW_S
        steps = self._steps
        while steps and steps[0][0] <= start:
            steps.popleft()
        busy = sum(min(compute, end - start) for end, compute in steps if end <= now)
        return max(0.0, min(1.0, busy / UTIL_WINDOW_S))

    def _advance(self, now: float) -> None:
        rate = self._leak_mb_per_s()
        if rate > 0:
            cap = self.total_bytes * (1 - self.reserved_share)
            self.leaked_bytes = min(cap, self.leaked_bytes + rate * MIB * (now - self._leak_at))
        self._leak_at = now

    def memory_used(self, now: float | None = None) -> float:
        self._advance(self._clock() if now is None else now)
        return min(1.0, self.reserved_share + self.leaked_bytes / self.total_bytes)

    def stall_ratio(self, now: float | None = None) -> float:
        """Allocator wait per second of compute: STALL_PER_PRESSURE x the share of the headroom leaked."""
        self._advance(self._clock() if now is None else now)
        headroom = self.total_bytes * (1 - self.reserved_share)
        return STALL_PER_PRESSURE * (self.leaked_bytes / headroom if headroom > 0 else 0.0)

    def release(self) -> None:
        """Memory allocated from scratch (wake-up after sleep): nothing leaked any more."""
        self._advance(self._clock())
        self.leaked_bytes = 0.0
