"""Analysis progress reaches browsers over /ws/conversation-logs/; anonymous sockets are refused."""

import asyncio

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator

from controlplane.asgi import application
from controlplane.convlogs.consumers import FORBIDDEN
from controlplane.convlogs.services import analyses
from controlplane.convlogs.services.logs import conversation_log_create
from controlplane.convlogs.synthetic import write_log
from tests.datasets.test_training import session_headers


@pytest.mark.django_db(transaction=True)
def test_progress_reaches_a_browser_socket(users, staging, tmp_path, monkeypatch):
    # A report every 50 ms: a few per analysis, and at most 20 a second, so the socket's channel (100 messages) holds
    # five seconds of them even while the analysis thread holds the GIL and the consumer cannot read.
    monkeypatch.setattr(analyses, "PROGRESS_EVERY_S", 0.05)
    agent = users["agent"]
    data = write_log(tmp_path / "log.jsonl", 3000, seed=8).read_bytes()
    log = conversation_log_create(actor=agent, name="june", filename="log.jsonl", chunks=[data])
    headers = session_headers(users["oncall"])

    async def scenario():
        socket = WebsocketCommunicator(application, "/ws/conversation-logs/", headers=headers)
        connected, _ = await socket.connect()
        assert connected
        analysis = await database_sync_to_async(analyses.log_analysis_create)(actor=agent, log=log, pool=staging)
        # On commit the analysis went to a thread of this process; running it here too is a no-op for the loser. The
        # socket is read while it runs, as a browser reads it: a reader that waited for the end would find its
        # channel over capacity (100 messages) on a slow machine and the final event dropped.
        run = asyncio.ensure_future(database_sync_to_async(analyses.log_analysis_run)(analysis_id=analysis.pk))
        events = []
        while True:
            event = await socket.receive_json_from(timeout=30)
            events.append(event)
            if event["status"] in ("succeeded", "failed"):
                break
        await run
        await socket.disconnect()
        return analysis, events

    analysis, events = async_to_sync(scenario)()
    assert {(e["type"], e["analysis_id"], e["log"]) for e in events} == {("log_analysis.progress", analysis.pk, "june")}
    percents = [e["progress"] for e in events]
    assert percents == sorted(percents) and percents[-1] == 100 and len(percents) >= 3
    assert events[-1]["status"] == "succeeded" and events[-1]["progress_text"] == "3000 conversations analysed"


@pytest.mark.django_db(transaction=True)
def test_the_progress_socket_refuses_anonymous_browsers():
    async def scenario():
        socket = WebsocketCommunicator(
            application, "/ws/conversation-logs/", headers=[(b"origin", b"http://localhost")]
        )
        return await socket.connect()

    assert async_to_sync(scenario)() == (False, FORBIDDEN)
