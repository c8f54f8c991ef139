"""The agent's own Prometheus metrics (engine_node_*), exposed on the gateway next to the engine's vllm:*."""

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

REGISTRY = CollectorRegistry()
REQUESTS = Counter(
    "engine_node_gateway_requests", "Requests answered by the gateway, by outcome", ["outcome"], registry=REGISTRY
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
    "Requests refused by admission: queue_full (429), queue_timeout or gate_closed (503)",
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


def watch_admission(admission) -> None:
    """Read the queue depths and windowed batch figures from this Admission at scrape time (the latest one wins)."""
    for name in ADMISSION_QUEUES:
        QUEUE_DEPTH.labels(queue=name).set_function(lambda name=name: admission.queue_depth(name))
        BATCH_EFFICIENCY.labels(queue=name).set_function(lambda name=name: admission.efficiency(name))
    BATCH_IDLE_RATIO.set_function(admission.idle_ratio)


def render() -> str:
    return generate_latest(REGISTRY).decode("utf-8")
