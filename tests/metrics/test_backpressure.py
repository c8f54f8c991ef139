"""A browser that stops reading thins out to the newest samples; ACK and alert events to it are never coalesced.

Through the real ASGI app on the Redis channel layer: an agent floods samples while its pool is published to and
alerts change; one dashboard tab's metrics socket confirms nothing for the whole flood (a stalled tab), while its
pool and alerts sockets are read as they come.
"""

import asyncio
import time

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async

from controlplane.alerts.realtime import alerts_changed
from controlplane.metrics import coalescing
from controlplane.metrics.services import ingest
from controlplane.nodes.models import EngineNode, Pool
from controlplane.nodes.services.pools import pool_publish
from controlplane.params.services.templates import template_create, template_version_create
from tests.metrics.conftest import browser_headers, sample
from tests.metrics.test_ingest import agent, connected, read

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis]

PUBLISHES = 3


def versions(actor) -> list:
    template = template_create(actor=actor, name="backpressure")
    document = {"inference_params": {"max_tokens": {"whitelist": []}}}
    first = template_version_create(actor=actor, template=template, document=document, base_number=None)
    document["inference_params"]["batch"] = {"timeout_ms": 40}
    second = template_version_create(actor=actor, template=template, document=document, base_number=1)
    return [first, second]


async def next_of_type(socket, kind: str, timeout_s: float = 10.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        event = await socket.receive_json_from(timeout=max(0.01, deadline - time.monotonic()))
        if event["type"] == kind:
            return event


def test_a_stalled_tab_gets_the_newest_sample_and_every_ack_and_alert_event(users, fleet_nodes, sre):
    oncall = browser_headers(users["oncall"])
    both = versions(sre)

    def publish(i: int) -> str:
        version = both[i % 2]
        pool_publish(actor=sre, pool=Pool.objects.get(name="staging"), version=version, reason=f"publish {i}")
        alerts_changed(notify=[i])
        return version.content_hash

    async def scenario():
        ingestor = ingest.sample_ingestor()
        ingestor.flush_interval_s = 0.005  # a flush per sample: many more frames than the window holds
        stalled = await connected("/ws/metrics/fleet/", oncall)
        pool_events = await connected("/ws/pools/staging/", oncall)
        alert_events = await connected("/ws/alerts/", oncall)
        sim = await agent(fleet_nodes["sim-1"])
        await sim.send_json_to({"type": "hello", "backend": "simulator", "applied_hash": "", "status": "online"})

        sent = {"samples": 0}
        stop = asyncio.Event()

        async def flood():
            while not stop.is_set():
                await sim.send_json_to(sample(qps=float(sent["samples"])))
                sent["samples"] += 1
                await asyncio.sleep(0.01)

        async def acknowledge_configs():
            while True:
                message = await sim.receive_json_from(timeout=30)
                if message.get("type") == "config":
                    await sim.send_json_to({"type": "ack", "hash": message["hash"], "version": message["version"]})

        flooding = asyncio.create_task(flood())
        acking = asyncio.create_task(acknowledge_configs())
        applied, notified = [], []
        for i in range(PUBLISHES):
            published = await database_sync_to_async(publish)(i)
            while True:  # the ACK of this publish, as browsers see it
                event = await next_of_type(pool_events, "nodes.updated")
                entries = [n for n in event["nodes"] if n["name"] == "sim-1"]
                if entries and entries[-1]["applied"]["hash"] == published:
                    applied.append(published)
                    break
            notified.append((await next_of_type(alert_events, "alerts.changed"))["notify"])
            await asyncio.sleep(0.3)
        stop.set()
        await flooding
        newest = float(sent["samples"] - 1)

        before_confirming = []
        while not await stalled.receive_nothing(timeout=0.5):
            before_confirming.append(await stalled.receive_json_from())
        frames = list(before_confirming)
        if frames:
            await stalled.send_json_to({"type": "metrics.received", "seq": frames[-1]["seq"]})
        while not frames or frames[-1]["values"]["qps"] < newest:
            frames.append(await read(stalled))
        assert await alert_events.receive_nothing(timeout=0.3), "an alert event arrived twice"
        acking.cancel()
        for socket in (stalled, pool_events, alert_events, sim):
            await socket.disconnect()
        return sent["samples"], before_confirming, frames, applied, notified

    thinned_before = coalescing.counters["live_samples_thinned"]
    samples, before_confirming, frames, applied, notified = async_to_sync(scenario)()

    assert len(before_confirming) == coalescing.WINDOW, "the server sends only a window ahead of the receipts"
    assert samples > 3 * coalescing.WINDOW, "too few samples to fill the window"
    assert frames[-1]["values"]["qps"] == samples - 1, "the newest sample reached the stalled tab"
    assert len(frames) < samples, "the stalled tab got every sample: nothing was thinned"
    figures = [f["values"]["qps"] for f in frames]
    assert figures == sorted(figures), "thinning never sends an older figure after a newer one"
    assert frames[-1]["thinned"] > 0
    assert coalescing.counters["live_samples_thinned"] - thinned_before >= frames[-1]["thinned"]
    assert [f["seq"] for f in frames] == list(range(1, len(frames) + 1))
    assert len(applied) == PUBLISHES, "every ACK reached the pool's browsers"
    assert notified == [[i] for i in range(PUBLISHES)], "every alert event reached the on-call page, in order"
    assert EngineNode.objects.get(name="sim-1").applied_hash == applied[-1]
