"""Real agents on the simulator send their samples to a real control plane (daphne, Redis layer, Postgres): the
browser's fleet socket gets their aggregate, and every sample passes the contract check (none is dropped)."""

import asyncio
import json
import time

import aiohttp
import pytest
from django.test import Client

from controlplane.metrics.models import MetricSample
from controlplane.nodes.services.engine_nodes import node_create
from controlplane.nodes.services.pools import pool_create
from tests.engine_node.fleet import FAST_PROFILE, AgentProcess, Traffic, wait_until
from tests.live_server import Daphne

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.agents]


async def fleet_events(ws_url: str, session_id: str, until) -> list[dict]:
    """The fleet socket's events until `until(events)` holds (or 30 s pass)."""
    events: list[dict] = []
    headers = {"Origin": "http://127.0.0.1", "Cookie": f"sessionid={session_id}"}
    async with aiohttp.ClientSession() as session, session.ws_connect(ws_url, headers=headers) as ws:
        deadline = time.monotonic() + 30
        while not until(events) and time.monotonic() < deadline:
            message = await ws.receive(timeout=max(0.1, deadline - time.monotonic()))
            events.append(json.loads(message.data))
            await ws.send_json({"type": "metrics.received", "seq": events[-1]["seq"]})
    return events


def test_simulated_agents_samples_reach_the_fleet_charts_and_history(tmp_path, sre, oncall):
    profile = tmp_path / "fast.yaml"
    profile.write_text(FAST_PROFILE)
    server = Daphne(tmp_path)
    server.start()
    agents = []
    try:
        for name, pool in (("sim-1", "staging"), ("sim-2", "prod-main")):
            _, token = node_create(actor=sre, name=name, pool=pool_create(actor=sre, name=pool, is_production=False))
            agents.append(
                AgentProcess(
                    name=name, token=token, control_plane_url=server.ws_agent_url, work=tmp_path, profile=profile
                )
            )
            agents[-1].start()
        client = Client()
        client.force_login(oncall)
        ws_url = server.url.replace("http://", "ws://") + "/ws/metrics/fleet/"

        def busy_and_complete(events):
            last = events[-1]["values"] if events else {}
            return last.get("nodes") == 2 and last.get("latency_p99_s") is not None and last["qps"] > 0

        with Traffic(agents, per_agent_threads=1):
            events = asyncio.run(fleet_events(ws_url, client.cookies["sessionid"].value, busy_and_complete))
        assert busy_and_complete(events), events[-3:]
        fleet = events[-1]
        assert (fleet["type"], fleet["scope"], fleet["name"]) == ("metrics.sample", "fleet", "fleet")
        assert fleet["t"] <= time.time()
        wait_until(lambda: MetricSample.objects.filter(scope="node", name="sim-2").count() >= 3, 10, "sim-2 rows")
        row = MetricSample.objects.filter(scope="node", name="sim-1").latest("t")
        assert row.pool == "staging" and "kv_cache_usage" in row.values
        assert MetricSample.objects.filter(scope="pool", name="prod-main").exists()
    finally:
        for agent in agents:
            agent.stop()
        server.stop()
    log = server.log_path.read_text()
    assert "sample dropped" not in log, [line for line in log.splitlines() if "sample dropped" in line][:3]
