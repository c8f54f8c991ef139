"""The pool's own figures over a replay's window, from the metrics app's stored pool aggregates."""

from datetime import datetime

from controlplane.metrics import selectors
from controlplane.metrics.models import MetricSample

# What a replay's page and comparison read beside the per-request rows: the resources the run exercised.
FIGURES = (
    "kv_cache_usage",
    "batch_efficiency",
    "spec_acceptance_rate",
    "gpu_util",
    "sm_util",
    "qps",
    "latency_p99_s",
)


def pool_window_metrics(*, pool_name: str, since: datetime, until: datetime) -> dict:
    """Per figure `{mean, max, samples}` of the pool's rows in [since, until], plus the window and resolution, and
    how many of the pool's nodes run the simulator (their figures are simulated, not vLLM measurements)."""
    resolution = selectors.history_resolution(since=since, until=until)
    _, columns = selectors.history(
        scope=MetricSample.Scope.POOL,
        name=pool_name,
        metrics=list(FIGURES),
        since=since,
        until=until,
        resolution_s=resolution,
    )
    figures = {}
    for name in FIGURES:
        values = [v for v in map(selectors._number, columns[name]) if v is not None]
        figures[name] = {
            "mean": sum(values) / len(values) if values else None,
            "max": max(values) if values else None,
            "samples": len(values),
        }
    simulated, total = selectors.simulated_node_counts(pool=pool_name)
    return {
        "since": since.isoformat(),
        "until": until.isoformat(),
        "resolution_s": resolution,
        "simulated_nodes": simulated,
        "nodes": total,
        "figures": figures,
    }
