"""The agent's own Prometheus metrics (engine_node_*), exposed on the gateway next to the engine's vllm:*."""

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

REGISTRY = CollectorRegistry()
REQUESTS = Counter(
    "engine_node_gateway_requests", "Requests answered by the gateway, by outcome", ["outcome"], registry=REGISTRY
)
# Labelled by the key's name (a slug its issuer chose; as many series as keys), never by the client's tag.
BUSINESS_TAGS_IGNORED = Counter(
    "engine_node_gateway_business_tags_ignored",
    "Chat requests whose business tag the client's key is not granted: served as if untagged",
    ["key"],
    registry=REGISTRY,
)
CONFIG_APPLIES = Counter(
    "engine_node_config_applies", "Configs applied (ack) or rejected (nack)", ["result", "kind"], registry=REGISTRY
)
ENGINE_RESTARTS = Counter("engine_node_engine_restarts", "Engine restarts, by cause", ["cause"], registry=REGISTRY)
IN_FLIGHT = Gauge("engine_node_requests_in_flight", "Requests admitted and not finished", registry=REGISTRY)
CONNECTED = Gauge("engine_node_control_plane_connected", "1 while connected to the control plane", registry=REGISTRY)

# Request policy (engine_node/policy/rules.py) and continuation (engine_node/completion.py).
POLICY_DECISIONS = Counter(
    "engine_node_policy_decisions",
    "Chat requests by the temperature tier, intent and rule the gateway policy chose",
    ["tier", "intent", "rule"],
    registry=REGISTRY,
)
POLICY_SECONDS = Histogram(
    "engine_node_policy_decision_seconds",
    "Time to classify a message and apply the policy rules",
    buckets=(0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01),
    registry=REGISTRY,
)
CONTINUATIONS = Counter(
    "engine_node_continuation_rounds",
    "Continuation rounds of replies cut mid-sentence by the first-turn cap",
    ["outcome"],
    registry=REGISTRY,
)

# Admission and batching (engine_node/admission.py); `queue` is "short" or "long" (long-context).
ADMISSION_QUEUES = ("short", "long")
QUEUE_DEPTH = Gauge(
    "engine_node_admission_queue_depth", "Requests waiting in the admission queue", ["queue"], registry=REGISTRY
)
BATCH_SIZE = Histogram(
    "engine_node_admission_batch_size",
    "Requests released to the engine together, per batch",
    ["queue"],
    buckets=(1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64),
    registry=REGISTRY,
)
BATCH_EFFICIENCY = Gauge(
    "engine_node_batch_efficiency",
    "Mean over the batches completed in the last window of sum(service times) / (batch bound x longest service)",
    ["queue"],
    registry=REGISTRY,
)
BATCH_IDLE_RATIO = Gauge(
    "engine_node_batch_idle_ratio",
    "Share of the last window in which requests waited although an engine slot was free (filling a batch)",
    registry=REGISTRY,
)
ADMISSION_REJECTIONS = Counter(
    "engine_node_admission_rejections",
    "Requests refused by admission: queue_full (429), queue_timeout, gate_closed or warming (503)",
    ["queue", "reason"],
    registry=REGISTRY,
)
QUEUE_WAIT = Histogram(
    "engine_node_admission_queue_wait_seconds",
    "Time an admitted request waited in the queue before release to the engine",
    ["queue"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
    registry=REGISTRY,
)

# Chat requests as the gateway saw them (engine_node/telemetry): the figures of the agent's 1 Hz sample that the
# series above and the engine's vllm:* series do not already carry.
CHAT_DURATION = Histogram(
    "engine_node_chat_request_duration_seconds",
    "End-to-end time of answered chat requests at the gateway, admission wait included",
    buckets=(0.05, 0.1, 0.25, 0.5, 0.8, 1, 1.2, 1.6, 2, 2.5, 3, 5, 10, 20, 30, 60),
    registry=REGISTRY,
)
CHAT_TTFT = Histogram(
    "engine_node_chat_time_to_first_token_seconds",
    "Time from a streamed chat request's arrival to its first content chunk",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10),
    registry=REGISTRY,
)
CHAT_TOKENS = Histogram(
    "engine_node_chat_request_tokens",
    "Prompt plus completion tokens of answered chat requests",
    buckets=(64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768),
    registry=REGISTRY,
)
DEGRADED = Gauge("engine_node_degraded", "1 while the pool's degradation state is active", registry=REGISTRY)

# Warmup runs (engine_node/warmup.py): trigger is start, config, restart, operator or rollback; result passed,
# failed or skipped.
WARMUPS = Counter(
    "engine_node_warmups",
    "Warmup runs of the pool's warmup dataset before the node takes traffic",
    ["trigger", "result"],
    registry=REGISTRY,
)

# Memory cleanup (engine_node/cleanup.py): trigger is operator, threshold or timer; result succeeded or failed.
CLEANUPS = Counter(
    "engine_node_memory_cleanups",
    "Memory cleanups (drain, prefix-cache reset, release of cached allocator blocks, resume)",
    ["trigger", "result"],
    registry=REGISTRY,
)
CLEANUP_SECONDS = Histogram(
    "engine_node_memory_cleanup_duration_seconds",
    "Time a memory cleanup held the gate closed, drain included",
    buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120),
    registry=REGISTRY,
)
CLEANUP_FRAGMENTATION = Gauge(
    "engine_node_memory_cleanup_fragmentation_ratio",
    "Memory fragmentation before and after the last cleanup (NaN without allocator statistics, e.g. on CPU)",
    ["phase"],
    registry=REGISTRY,
)
CLEANUP_KV_USAGE = Gauge(
    "engine_node_memory_cleanup_kv_cache_usage_ratio",
    "KV-cache block usage before and after the last cleanup",
    ["phase"],
    registry=REGISTRY,
)
_GPU_UTILIZATION: list[Gauge] = []


def watch_gpu(read) -> None:
    """Expose `read()` (0..1, None when unknown) as engine_node_gpu_utilization_ratio; only hosts with GPUs call it."""
    if not _GPU_UTILIZATION:
        _GPU_UTILIZATION.append(
            Gauge(
                "engine_node_gpu_utilization_ratio",
                "Mean nvidia-smi utilization.gpu over the host's GPUs (share of time a kernel was running)",
                registry=REGISTRY,
            )
        )

    def value() -> float:
        reading = read()
        return float("nan") if reading is None else reading

    _GPU_UTILIZATION[0].set_function(value)


def watch_admission(admission) -> None:
    """Read the queue depths and windowed batch figures from this Admission at scrape time (the latest one wins)."""
    for name in ADMISSION_QUEUES:
        QUEUE_DEPTH.labels(queue=name).set_function(lambda name=name: admission.queue_depth(name))
        BATCH_EFFICIENCY.labels(queue=name).set_function(lambda name=name: admission.efficiency(name))
    BATCH_IDLE_RATIO.set_function(admission.idle_ratio)


class _ReviewSampling:
    """The review sampler's own counters, read at scrape time: nothing is added to the request path."""

    def __init__(self):
        self.sampler = None

    def collect(self):
        sampler = self.sampler
        if sampler is None:
            return
        offered = CounterMetricFamily(
            "engine_node_review_samples",
            "Unsure decisions (below the floor, close runner-up, overridden) offered to the review queue, by outcome: "
            "kept, refused by the rate limit, or kept and then pushed out of a full buffer",
            labels=["outcome"],
        )
        offered.add_metric(["kept"], sampler.sampled)
        offered.add_metric(["rate_limited"], sampler.rate_limited)
        offered.add_metric(["dropped"], sampler.dropped)
        yield offered
        pending = "Samples waiting to go to the control plane (masked as they leave)"
        yield GaugeMetricFamily("engine_node_review_samples_pending", pending, value=len(sampler))


_REVIEW_SAMPLING = _ReviewSampling()
REGISTRY.register(_REVIEW_SAMPLING)


def watch_review(sampler) -> None:
    """Expose this ReviewSampler's counters (the latest one wins)."""
    _REVIEW_SAMPLING.sampler = sampler


def render() -> str:
    return generate_latest(REGISTRY).decode("utf-8")
