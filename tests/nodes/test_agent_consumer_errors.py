"""The agents' WebSocket through a database error: retried, recorded in the loops' health record, never a crash.

The failures are injected around the real services (a wrapper raises the `OperationalError` SQLite gives a writer
locked out past its busy timeout, then calls the service itself); everything else is the real ASGI app.
"""

import asyncio
import functools
import gc
import time

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.db import OperationalError

from controlplane.asgi import application
from controlplane.lib import loop_health
from controlplane.metrics.models import MetricSample
from controlplane.metrics.services import ingest
from controlplane.nodes import agent_consumer
from controlplane.nodes.models import EngineNode
from controlplane.nodes.services import agent_sessions
from controlplane.nodes.services.engine_nodes import node_create
from tests.factories import pools
from tests.metrics.conftest import agent_headers, sample

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis]


@pytest.fixture(autouse=True)
def writer_connections_closed():
    """The batchers write from executor threads of each test's event loop; their database connections outlive the
    threads until collected, and an open one keeps the test database from being dropped at the end."""
    yield
    gc.collect()


@pytest.fixture
def token(sre, monkeypatch):
    monkeypatch.setattr(agent_consumer, "RETRY_DELAYS_S", (0.05, 0.05))
    staging, _ = pools(sre)
    _, token = node_create(actor=sre, name="gpu-1", pool=staging)
    return token


def locked_first(monkeypatch, module, name: str, times: int) -> list:
    """Make `module.name` raise "database is locked" on its first `times` calls, then run; returns the call log."""
    real, calls = getattr(module, name), []

    @functools.wraps(real)
    def wrapper(**kwargs):
        calls.append(kwargs)
        if len(calls) <= times:
            raise OperationalError("database is locked")
        return real(**kwargs)

    monkeypatch.setattr(module, name, wrapper)
    return calls


def health(loop: str) -> loop_health.LoopHealth:
    return next(record for record in loop_health.loops_health() if record.loop == loop)


async def connect(token: str) -> WebsocketCommunicator:
    socket = WebsocketCommunicator(application, "/ws/agent/", headers=agent_headers(token))
    ok, code = await socket.connect()
    assert ok, code
    assert (await socket.receive_json_from(timeout=5))["type"] == "welcome"
    return socket


async def still_open(socket: WebsocketCommunicator) -> None:
    """The connection answers: an unknown message type gets its error reply."""
    await socket.send_json_to({"type": "ping-test"})
    assert (await socket.receive_json_from(timeout=5))["type"] == "error"


async def until(predicate, what: str, timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while not await database_sync_to_async(predicate)():
        assert time.monotonic() < deadline, f"no {what} after {timeout_s} s"
        await asyncio.sleep(0.05)


def test_a_locked_database_during_a_heartbeat_is_retried_and_the_connection_stays(token, monkeypatch):
    calls = locked_first(monkeypatch, agent_sessions, "node_heartbeat", 2)

    async def scenario():
        socket = await connect(token)
        await socket.send_json_to({"type": "heartbeat", "status": "online", "log_tail": ["engine ready"]})
        await still_open(socket)
        await socket.disconnect()

    async_to_sync(scenario)()
    assert len(calls) == 3
    assert EngineNode.objects.get(name="gpu-1").log_tail == ["engine ready"]
    record = health(agent_consumer.LOOP)
    assert record.failures == 0 and "node gpu-1: node_heartbeat" in record.last_error


def test_a_hello_that_cannot_be_stored_closes_the_connection_so_the_agent_reconnects(token, monkeypatch):
    calls = locked_first(monkeypatch, agent_sessions, "node_hello", 10)

    async def scenario():
        socket = await connect(token)
        await socket.send_json_to({"type": "hello", "status": "online"})
        return await socket.receive_output(timeout=5)

    closed = async_to_sync(scenario)()
    assert closed == {"type": "websocket.close", "code": agent_consumer.INTERNAL_ERROR}
    assert len(calls) == len(agent_consumer.RETRY_DELAYS_S) + 1
    record = health(agent_consumer.LOOP)
    assert record.failures >= 1 and "node gpu-1: hello message: OperationalError" in record.last_error


def test_warmup_progress_of_a_failed_flush_is_kept_and_stored_by_the_next(token, monkeypatch):
    calls = locked_first(monkeypatch, agent_sessions, "nodes_warmup_progress", 1)

    async def scenario():
        socket = await connect(token)
        for done in (10, 20):
            await socket.send_json_to({"type": "warmup_progress", "state": "running", "done": done, "total": 100})
        await socket.send_json_to({"type": "warmup_progress", "state": "failed", "done": 100, "total": 100})
        await until(lambda: EngineNode.objects.get(name="gpu-1").warmup_state == "failed", "stored warmup")
        # The flush records its success once the write's thread hands back, which can be after the row is visible.
        await until(lambda: health("agent-warmup-progress").failures == 0, "the loop's recovery")
        await still_open(socket)
        await socket.disconnect()

    async_to_sync(scenario)()
    node = EngineNode.objects.get(name="gpu-1")
    assert node.warmup_progress["done"] == 100 and node.warmup_failed_at is not None
    assert len(calls) == 2
    record = health("agent-warmup-progress")
    assert record.failures == 0 and record.last_error.startswith("warmup progress of 1 node(s): OperationalError")


def test_samples_of_a_failed_write_are_kept_and_written_again(token, monkeypatch):
    calls = locked_first(monkeypatch, ingest, "metric_samples_store", 1)
    now = time.time()

    async def scenario():
        socket = await connect(token)
        await socket.send_json_to(sample(t=now))
        await until(lambda: len(calls) >= 1, "a first write")
        await socket.send_json_to(sample(t=now + 1))
        await until(
            lambda: MetricSample.objects.filter(scope="node", name="gpu-1").count() == 2, "both samples stored", 15
        )
        await socket.disconnect()

    async_to_sync(scenario)()
    assert ingest.counters["rows_dropped"] == 0
    record = health(ingest.WRITE_LOOP)
    assert record.failures == 0 and record.last_error.startswith("storing 1 samples and 2 aggregates")
