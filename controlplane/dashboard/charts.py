"""Settings of the live metric charts on the overview, pool and node pages (templates/metrics/_charts.html)."""

from django.urls import reverse

from controlplane.metrics.models import MetricSample
from controlplane.metrics.selectors import SIMULATOR_BACKEND, simulated_node_counts


def _charts(scope: str, name: str, ws_path: str, simulated: int, total: int) -> dict:
    return {
        "scope": scope,
        "name": name,
        "ws_path": ws_path,
        "history_url": reverse("api:metric-history", kwargs={"scope": scope, "name": name}),
        "simulated": simulated,
        "total": total,
    }


def fleet_charts() -> dict:
    simulated, total = simulated_node_counts()
    return _charts(MetricSample.Scope.FLEET, MetricSample.FLEET_NAME, "/ws/metrics/fleet/", simulated, total)


def pool_charts(pool) -> dict:
    simulated, total = simulated_node_counts(pool=pool.name)
    return _charts(MetricSample.Scope.POOL, pool.name, f"/ws/metrics/pools/{pool.name}/", simulated, total)


def node_charts(node) -> dict:
    simulated = int(node.backend == SIMULATOR_BACKEND)
    return _charts(MetricSample.Scope.NODE, node.name, f"/ws/metrics/nodes/{node.name}/", simulated, 1)
