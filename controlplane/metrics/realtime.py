"""Live figures to browsers: one `metrics.sample` event per changed node, pool and the fleet, per ingestor flush."""

import asyncio

from controlplane.lib import realtime
from controlplane.metrics.models import MetricSample

_GROUPS = {
    MetricSample.Scope.NODE: realtime.metrics_node_group,
    MetricSample.Scope.POOL: realtime.metrics_pool_group,
    MetricSample.Scope.FLEET: lambda _name: realtime.metrics_fleet_group(),
}


def metrics_sample(*, scope: str, name: str, t: float, values: dict) -> realtime.MetricsSample:
    return {"type": "metrics.sample", "scope": scope, "name": name, "t": t, "values": values}


async def metrics_samples_send(events: list[realtime.MetricsSample]) -> None:
    """Send the fleet's and pools' events, then the nodes'. A group send only queues the event on each member's
    channel, and the channel layer drops it for a browser whose channel is full, so a slow browser never holds this
    up. The few aggregate events go first: interleaved with a flush's hundreds of node events, they would wait."""
    aggregates = [e for e in events if e["scope"] != MetricSample.Scope.NODE]
    nodes = [e for e in events if e["scope"] == MetricSample.Scope.NODE]
    for batch in (aggregates, nodes):
        await asyncio.gather(*(realtime.send_async([_GROUPS[e["scope"]](e["name"])], e) for e in batch))
