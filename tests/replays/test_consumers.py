"""Live replay progress over the real ASGI app: a run's page and the list get `replay.progress` on a cancel;
anonymous browsers are refused."""

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator

from controlplane.asgi import application
from controlplane.replays.consumers import FORBIDDEN
from controlplane.replays.models import ReplayRun
from controlplane.replays.services import replay_run_cancel
from tests.datasets.test_training import session_headers
from tests.factories import pools
from tests.replays.logs import log_lines, store_log

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_cancel_reaches_the_runs_page_and_the_list(users, settings, tmp_path):
    settings.CONVERSATION_LOG_DIR = tmp_path
    staging, _ = pools(users["sre"])
    agent = users["agent"]
    # A queued run as a row (the service would hand it to its start task at once, which fails it: no node serves).
    log = store_log(agent, log_lines(3))
    run = ReplayRun.objects.create(
        pool=staging, log=log, log_name=log.name, qps=1, duration_cap_s=60, created_by=agent, reason="x"
    )
    headers = session_headers(users["oncall"])

    async def scenario():
        page = WebsocketCommunicator(application, f"/ws/replays/{run.pk}/", headers=headers)
        listing = WebsocketCommunicator(application, "/ws/replays/", headers=headers)
        other = WebsocketCommunicator(application, f"/ws/replays/{run.pk + 1}/", headers=headers)
        for socket in (page, listing, other):
            assert (await socket.connect())[0]
        await database_sync_to_async(replay_run_cancel)(actor=agent, run=run, reason="wrong log")
        events = [await page.receive_json_from(timeout=5), await listing.receive_json_from(timeout=5)]
        nothing = await other.receive_nothing(timeout=0.3)
        for socket in (page, listing, other):
            await socket.disconnect()
        return events, nothing

    events, nothing = async_to_sync(scenario)()
    assert [(e["type"], e["run_id"], e["status"]) for e in events] == [("replay.progress", run.pk, "cancelled")] * 2
    assert nothing


def test_anonymous_browsers_are_refused(users):
    async def scenario():
        socket = WebsocketCommunicator(application, "/ws/replays/", headers=[(b"origin", b"http://localhost")])
        return await socket.connect()

    assert async_to_sync(scenario)() == (False, FORBIDDEN)
