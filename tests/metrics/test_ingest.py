"""Samples through the real ASGI app (agent WebSocket in, browser WebSockets out) and into the history tables."""

import asyncio
import logging
import time

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator

from controlplane.asgi import application
from controlplane.lib import realtime
from controlplane.metrics.consumers import FORBIDDEN
from controlplane.metrics.models import MetricSample
from controlplane.metrics.services import ingest
from tests.metrics.conftest import agent_headers, browser_headers, sample

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis]


async def connected(path: str, headers) -> WebsocketCommunicator:
    socket = WebsocketCommunicator(application, path, headers=headers)
    ok, code = await socket.connect()
    assert ok, code
    return socket


async def agent(token: str) -> WebsocketCommunicator:
    socket = await connected("/ws/agent/", agent_headers(token))
    assert (await socket.receive_json_from(timeout=5))["type"] == "welcome"
    return socket


async def read(socket, timeout_s: float = 5.0) -> dict:
    """The next sample frame, confirmed as the dashboard confirms it (the server sends a few frames ahead)."""
    event = await socket.receive_json_from(timeout=timeout_s)
    await socket.send_json_to({"type": "metrics.received", "seq": event["seq"]})
    return event


async def next_event(socket, predicate, timeout_s: float = 5.0) -> dict:
    """The first event on `socket` that satisfies `predicate` (earlier flushes may carry fewer nodes)."""
    deadline = time.monotonic() + timeout_s
    while True:
        event = await read(socket, max(0.01, deadline - time.monotonic()))
        if predicate(event):
            return event


async def rows_stored(count: int, **filters) -> None:
    def stored():
        return MetricSample.objects.filter(**filters).count()

    deadline = time.monotonic() + 5
    while await database_sync_to_async(stored)() < count:
        assert time.monotonic() < deadline, f"fewer than {count} rows {filters} after 5 s"
        await asyncio.sleep(0.05)


def test_samples_fan_out_to_fleet_pool_and_node_groups_and_are_stored(users, fleet_nodes):
    oncall = browser_headers(users["oncall"])
    now = time.time()

    async def scenario():
        fleet = await connected("/ws/metrics/fleet/", oncall)
        prod = await connected("/ws/metrics/pools/prod-main/", oncall)
        gpu1 = await connected("/ws/metrics/nodes/gpu-1/", oncall)
        agents = {name: await agent(token) for name, token in fleet_nodes.items()}
        await agents["gpu-1"].send_json_to(sample(t=now, qps=3.0, latency_p99_s=0.9, error_rate=0.1))
        await agents["gpu-2"].send_json_to(sample(t=now + 0.01, qps=1.0, latency_p99_s=1.7, error_rate=0.5))
        await agents["sim-1"].send_json_to(sample(t=now + 0.02, qps=2.0, latency_p99_s=0.5))
        fleet_event = await next_event(fleet, lambda e: e["values"]["nodes"] == 3)
        prod_event = await next_event(prod, lambda e: e["values"]["nodes"] == 2)
        node_event = await gpu1.receive_json_from(timeout=5)
        assert await gpu1.receive_nothing(timeout=0.4), "the node group got another node's sample"
        await rows_stored(3, scope="node")
        await rows_stored(1, scope="fleet")
        for socket in (fleet, prod, gpu1, *agents.values()):
            await socket.disconnect()
        return fleet_event, prod_event, node_event

    fleet_event, prod_event, node_event = async_to_sync(scenario)()
    assert fleet_event["type"] == "metrics.sample"
    assert (fleet_event["scope"], fleet_event["name"]) == ("fleet", "fleet")
    assert fleet_event["t"] == pytest.approx(now + 0.02)  # the newest sample included
    assert fleet_event["values"]["qps"] == pytest.approx(6.0)
    assert fleet_event["values"]["latency_p99_s"] == 1.7
    assert (prod_event["scope"], prod_event["name"]) == ("pool", "prod-main")
    assert prod_event["values"]["qps"] == pytest.approx(4.0)
    assert prod_event["values"]["error_rate"] == pytest.approx(0.2)  # (0.1 * 3 + 0.5 * 1) / 4
    assert (node_event["scope"], node_event["name"], node_event["t"]) == ("node", "gpu-1", pytest.approx(now))
    assert node_event["values"] == sample(qps=3.0, latency_p99_s=0.9, error_rate=0.1)["m"]

    gpu1_row = MetricSample.objects.get(scope="node", name="gpu-1")
    assert (gpu1_row.pool, gpu1_row.resolution_s, gpu1_row.values["qps"]) == ("prod-main", 1, 3.0)
    assert gpu1_row.t.timestamp() == pytest.approx(now, abs=1e-3)
    pool_rows = MetricSample.objects.filter(scope="pool", name="prod-main")
    assert pool_rows.exists() and all(row.t.microsecond == 0 for row in pool_rows)
    assert pool_rows.order_by("-t").first().values["qps"] == pytest.approx(4.0)


def test_aggregates_are_one_row_per_second_however_many_flushes(users, fleet_nodes):
    async def scenario():
        socket = await agent(fleet_nodes["gpu-1"])
        started = time.time()
        for i in range(12):  # 12 samples over ~3 s: about 12 flushes
            await socket.send_json_to(sample(qps=float(i)))
            await asyncio.sleep(0.26)
        await rows_stored(12, scope="node")
        await asyncio.sleep(0.3)
        await socket.disconnect()
        return started, time.time()

    started, finished = async_to_sync(scenario)()
    fleet_rows = MetricSample.objects.filter(scope="fleet")
    seconds = {row.t for row in fleet_rows}
    assert len(seconds) == fleet_rows.count(), "two fleet rows for one second"
    assert 3 <= len(seconds) <= int(finished) - int(started) + 1
    assert fleet_rows.order_by("-t").first().values["qps"] == 11.0  # the newest flush of the second wins


def test_a_bad_sample_is_dropped_logged_and_counted_and_the_connection_stays(users, fleet_nodes, caplog):
    before = ingest.counters["samples_dropped"]
    sre = browser_headers(users["sre"])

    async def scenario():
        fleet = await connected("/ws/metrics/fleet/", sre)
        socket = await agent(fleet_nodes["gpu-2"])
        broken = sample(qps="fast")
        unknown = sample()
        unknown["m"]["gpu_temp_c"] = 71
        for message in (broken, unknown, {"type": "sample"}):
            await socket.send_json_to(message)
        assert await fleet.receive_nothing(timeout=0.6), "a dropped sample reached a browser"
        assert await socket.receive_nothing(timeout=0.1), "the agent was answered or disconnected"
        await socket.send_json_to(sample(qps=2.5))
        event = await fleet.receive_json_from(timeout=5)
        await rows_stored(1, scope="node", name="gpu-2")
        await socket.disconnect()
        await fleet.disconnect()
        return event

    with caplog.at_level(logging.WARNING, logger="controlplane.metrics.services.ingest"):
        event = async_to_sync(scenario)()
    assert event["values"]["qps"] == 2.5
    assert ingest.counters["samples_dropped"] - before == 3
    assert MetricSample.objects.filter(scope="node").count() == 1
    lines = [r.getMessage() for r in caplog.records if "sample dropped" in r.getMessage()]
    assert lines == ["node gpu-2: sample dropped: qps: expected a number, got str"]  # one line a minute per node


def test_a_node_that_stops_sending_leaves_the_pool_figures(users, fleet_nodes):
    oncall = browser_headers(users["oncall"])

    async def scenario():
        ingestor = ingest.sample_ingestor()
        ingestor.max_age_s = 0.6
        pool = await connected("/ws/metrics/pools/prod-main/", oncall)
        gpu1, gpu2 = await agent(fleet_nodes["gpu-1"]), await agent(fleet_nodes["gpu-2"])
        await gpu1.send_json_to(sample(qps=1.0))
        await gpu2.send_json_to(sample(qps=2.0))
        both = await next_event(pool, lambda e: e["values"]["nodes"] == 2)
        for _ in range(4):  # gpu-2 went quiet; gpu-1 goes on
            await asyncio.sleep(0.3)
            await gpu1.send_json_to(sample(qps=1.0))
        alone = await next_event(pool, lambda e: e["values"]["nodes"] == 1)
        for socket in (pool, gpu1, gpu2):
            await socket.disconnect()
        return both, alone

    both, alone = async_to_sync(scenario)()
    assert both["values"]["qps"] == pytest.approx(3.0)
    assert alone["values"]["qps"] == pytest.approx(1.0)


def test_a_browser_that_never_reads_does_not_hold_up_ingestion(users, fleet_nodes):
    """A stuck browser's channel fills to the layer's capacity and then misses events; nobody waits for it."""
    layer = get_channel_layer()
    oncall = browser_headers(users["oncall"])

    async def scenario():
        stuck = await layer.new_channel()
        await layer.group_add(realtime.metrics_fleet_group(), stuck)
        attentive = await connected("/ws/metrics/fleet/", oncall)
        ingestor = ingest.sample_ingestor()
        ingestor.flush_interval_s = 0.005
        sent = layer.capacity + 50
        received = []

        async def follow():  # the attentive tab reads and confirms as frames come
            received.append(await read(attentive))
            while received[-1]["values"]["qps"] < sent - 1:
                received.append(await read(attentive))

        following = asyncio.create_task(follow())
        for i in range(sent):
            ingestor.record(node="gpu-1", pool="prod-main", message=sample(qps=float(i)))
            await asyncio.sleep(0.03)
        await following  # the attentive tab got every flush while the stuck channel was full: nobody waited for it
        queued = 0
        while queued <= sent:
            try:
                await asyncio.wait_for(layer.receive(stuck), timeout=0.2)
            except TimeoutError:
                break
            queued += 1
        await layer.group_discard(realtime.metrics_fleet_group(), stuck)
        await attentive.disconnect()
        await rows_stored(sent, scope="node")
        return received, queued

    received, queued = async_to_sync(scenario)()
    figures = [e["values"]["qps"] for e in received]
    assert figures == sorted(set(figures)), "the attentive browser missed no flush and got them in order"
    assert len(received) > get_channel_layer().capacity, "too few flushes to fill the stuck channel"
    assert queued == get_channel_layer().capacity  # the rest were dropped for the stuck channel only


def test_anonymous_browsers_are_refused(db):
    async def scenario():
        socket = WebsocketCommunicator(application, "/ws/metrics/fleet/", headers=[(b"origin", b"http://localhost")])
        return await socket.connect()

    assert async_to_sync(scenario)() == (False, FORBIDDEN)


def test_a_browser_socket_outlives_a_stalled_stream(users, fleet_nodes):
    """Nothing on the layer for longer than its 5 s blocking receive must not end the browser's socket."""
    oncall = browser_headers(users["oncall"])

    async def scenario():
        fleet = await connected("/ws/metrics/fleet/", oncall)
        socket = await agent(fleet_nodes["gpu-1"])
        assert await fleet.receive_nothing(timeout=6.5)
        await socket.send_json_to(sample(qps=4.0))
        event = await fleet.receive_json_from(timeout=5)
        await socket.disconnect()
        await fleet.disconnect()
        return event

    assert async_to_sync(scenario)()["values"]["qps"] == 4.0
