"""Contract-A samples as an agent sends them, and nodes to send them from."""

import time

import pytest


def sample_m(**figures) -> dict:
    """A complete `m`: a busy node with 12 requests in the window; keyword arguments override figures."""
    m = {
        "qps": 1.2,
        "latency_p50_s": 0.4,
        "latency_p99_s": 1.1,
        "latency_p999_s": 1.3,
        "ttft_p50_s": 0.1,
        "ttft_p99_s": 0.3,
        "error_rate": 0.0,
        "rejected_rate": 0.0,
        "requests_running": 3.0,
        "requests_waiting": 1.0,
        "kv_cache_usage": 0.42,
        "queue_depth_short": 1,
        "queue_depth_long": 0,
        "batch_size_mean": 3.0,
        "batch_size_hist": {"2": 2, "4": 2},
        "batch_efficiency": 0.7,
        "batch_idle_ratio": 0.1,
        "spec_acceptance_rate": 0.8,
        "spec_rejection_rate": 0.2,
        "fragmentation_ratio": 0.12,
        "gpu_util": None,
        "sm_util": None,
        "gpu_memory_used": None,
        "batch_timeout_rate": None,
        "length_hist": {"le256": 6, "le512": 3, "le1k": 2, "le2k": 1, "gt2k": 0},
        "long_request_share": 1 / 12,
        "intents": {"order_status": 8, "refund": 4},
        "tiers": {"strict": 4, "normal": 8, "creative": 0},
        "intent_classified": 12,
        "intent_below_floor_share": 0.25,
        "intent_confidence_hist": {"50-60": 1, "70-80": 2, "90-100": 9},
        "degraded": 0,
        "engine_restarts": 0,
        "absent": {"gpu_util": "no NVIDIA GPU on this host", "sm_util": "no NVIDIA GPU on this host"},
    }
    m.update(figures)
    if "absent" not in figures:  # a figure given a value is not absent
        m["absent"] = {key: why for key, why in m["absent"].items() if m[key] is None}
    return m


def sample(t: float | None = None, **figures) -> dict:
    return {"type": "sample", "t": time.time() if t is None else t, "window_s": 10, "m": sample_m(**figures)}


@pytest.fixture
def fleet_nodes(sre):
    """Pools staging and prod-main; nodes sim-1 (staging, simulator), gpu-1 and gpu-2 (prod-main, vLLM), with tokens."""
    from controlplane.nodes.models import EngineNode
    from controlplane.nodes.services.engine_nodes import node_create
    from tests.factories import pools

    staging, prod = pools(sre)
    tokens = {}
    for name, pool, backend in (("sim-1", staging, "simulator"), ("gpu-1", prod, "vllm"), ("gpu-2", prod, "vllm")):
        node, tokens[name] = node_create(actor=sre, name=name, pool=pool)
        EngineNode.objects.filter(pk=node.pk).update(backend=backend)
    return tokens


def browser_headers(user) -> list[tuple[bytes, bytes]]:
    """A dashboard tab's WebSocket headers: its session cookie and an allowed Origin."""
    from django.test import Client

    client = Client()
    client.force_login(user)
    return [(b"origin", b"http://localhost"), (b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode())]


def agent_headers(token: str) -> list[tuple[bytes, bytes]]:
    return [(b"authorization", f"Bearer {token}".encode())]


@pytest.fixture(autouse=True)
def fresh_drop_log():
    """Dropped-sample log lines are rate-limited per node across the process; each test starts with none logged."""
    from controlplane.metrics.services import ingest

    ingest._drop_logged_at.clear()
    ingest._drops_unlogged.clear()


@pytest.fixture(autouse=True)
def writer_connections_closed():
    """The ingestor writes from executor threads of each test's event loop; their database connections outlive the
    threads until collected, and an open one keeps the test database from being dropped at the end."""
    yield
    import gc

    gc.collect()
