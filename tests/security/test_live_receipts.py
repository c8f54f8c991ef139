"""A browser's receipts on the live metrics socket: forged or malformed ones cannot make the server send more than
its window ahead, nor break the socket."""

import asyncio

import pytest
from asgiref.sync import async_to_sync

from controlplane.metrics import coalescing
from controlplane.metrics.services import ingest
from tests.metrics.conftest import browser_headers, fleet_nodes, sample  # noqa: F401 - fleet_nodes is a fixture
from tests.metrics.test_ingest import agent, connected

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis]

HOSTILE = [
    '{"type": "metrics.received", "seq": 1000000000}',  # a frame never sent: would open the window for ever
    '{"type": "metrics.received", "seq": -5}',
    '{"type": "metrics.received", "seq": 1e308}',
    '{"type": "metrics.received", "seq": true}',
    '{"type": "metrics.received", "seq": [1, 2]}',
    '{"type": "metrics.received"}',
    "not json at all",
    "[" * 100_000,  # deeply nested: never parsed
    '{"type": "metrics.received", "seq": ' + "9" * 5000 + "}",  # a huge integer: never parsed
    " ",
]


def test_forged_and_malformed_receipts_neither_open_the_window_nor_close_the_socket(users, fleet_nodes):  # noqa: F811
    oncall = browser_headers(users["oncall"])

    async def scenario():
        ingest.sample_ingestor().flush_interval_s = 0.005
        tab = await connected("/ws/metrics/fleet/", oncall)
        for text in HOSTILE:
            await tab.send_to(text_data=text)
        await tab.send_to(bytes_data=b"\x00" * 64)
        sim = await agent(fleet_nodes["sim-1"])
        for i in range(4 * coalescing.WINDOW):
            await sim.send_json_to(sample(qps=float(i)))
            await asyncio.sleep(0.02)
        frames = []
        while not await tab.receive_nothing(timeout=0.5):
            frames.append(await tab.receive_json_from())
        await tab.send_json_to({"type": "metrics.received", "seq": frames[-1]["seq"]})
        newest = await tab.receive_json_from(timeout=5)  # the socket still works, and receipts still count
        for socket in (tab, sim):
            await socket.disconnect()
        return frames, newest

    frames, newest = async_to_sync(scenario)()
    assert len(frames) == coalescing.WINDOW
    assert newest["seq"] == coalescing.WINDOW + 1
    assert newest["thinned"] > 0
