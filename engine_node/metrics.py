"""The agent's own Prometheus metrics (engine_node_*), exposed on the gateway next to the engine's vllm:*."""

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

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


def render() -> str:
    return generate_latest(REGISTRY).decode("utf-8")
