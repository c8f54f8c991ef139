"""What the gateway's batcher works with: the template's `batch.*` section, the seed's batch size, and the
refusals a request can get (429 for a full queue, 503 for a warming node, a closed gate or a wait past the queue
timeout)."""

from dataclasses import dataclass

# The `batch` section's defaults, copied from controlplane/params/schema.py because engine_node never imports
# the control plane; tests/engine_node/test_admission.py fails when the two drift apart.
DEFAULT_BATCH = {
    "min_size": 2,
    "max_size": 8,
    "timeout_ms": 50,
    "long_context_threshold": 2048,
    "long_context_max_size": 2,
    "max_queue": 256,
    "long_context_max_queue": 16,
}
# The seed's get_batch_size(): when the waiting prompts average more than this, only small batches go out.
LONG_AVERAGE_TOKENS = 1000
QUEUE_FULL_RETRY_AFTER_S = 1
# "Batch timeout exceeded" (the seed's fault case 1): a request that waited out its batch's timeout and then a whole
# timeout more without a slot for it (released after 2 x batch.timeout_ms), or that waited the queue timeout and was
# refused. A partial batch released at its deadline is the batcher working as designed, not a timeout exceeded.
OVERDUE_TIMEOUTS = 2


class AdmissionRejected(Exception):
    """A request admission refused; `retry_after_s` goes into the Retry-After header."""

    reason = "rejected"

    def __init__(self, message: str, retry_after_s: int):
        super().__init__(message)
        self.retry_after_s = retry_after_s


class GateClosed(AdmissionRejected):
    """The gate stayed closed (drain) for the whole queue timeout: 503."""

    reason = "gate_closed"

    def __init__(self, retry_after_s: int):
        super().__init__(f"engine unavailable; retry after {retry_after_s}s", retry_after_s)


class Warming(GateClosed):
    """The node is warming up (engine_node/warmup.py): refused at once rather than after the queue timeout, with a
    Retry-After of the warmup's expected remaining time, bounded to a few seconds."""

    reason = "warming"

    def __init__(self, message: str, retry_after_s: int):
        AdmissionRejected.__init__(self, message, retry_after_s)


class QueueTimeout(GateClosed):
    """The request waited the whole queue timeout with the gate open (engine saturated): 503."""

    reason = "queue_timeout"

    def __init__(self, retry_after_s: int):
        AdmissionRejected.__init__(self, f"engine overloaded; retry after {retry_after_s}s", retry_after_s)


class QueueFull(AdmissionRejected):
    """The request's queue already holds its maximum of waiting requests: 429."""

    reason = "queue_full"

    def __init__(self, queue: str, retry_after_s: int = QUEUE_FULL_RETRY_AFTER_S):
        super().__init__(f"too many waiting requests ({queue} queue); retry after {retry_after_s}s", retry_after_s)
        self.queue = queue


@dataclass(frozen=True, slots=True)
class BatchParams:
    """The template's `batch.*` section, every omitted or missing field filled from DEFAULT_BATCH."""

    min_size: int
    max_size: int
    timeout_ms: int
    long_context_threshold: int
    long_context_max_size: int
    max_queue: int
    long_context_max_queue: int

    @classmethod
    def from_section(cls, batch: dict | None) -> "BatchParams":
        values = {**DEFAULT_BATCH, **(batch or {})}
        return cls(**{key: max(1, int(values[key])) for key in DEFAULT_BATCH})


DEFAULT_PARAMS = BatchParams.from_section(None)


def target_batch_size(pending: int, avg_len: float, *, min_size: int, max_size: int, small_size: int) -> int:
    """The seed's get_batch_size() with the template's bounds in place of its 2 and 8."""
    if avg_len > LONG_AVERAGE_TOKENS:
        return min(small_size, pending)
    return min(max_size, max(min_size, pending // 2))
