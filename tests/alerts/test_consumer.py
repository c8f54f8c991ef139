"""`ws/alerts/`: browsers hear an incident fire, get acknowledged and resolve, as `alerts.changed` events."""

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client

from controlplane.alerts.consumers import FORBIDDEN
from controlplane.alerts.evaluation import evaluate
from controlplane.alerts.models import AlertGroup
from controlplane.alerts.services.lifecycle import alert_group_acknowledge
from controlplane.asgi import application
from tests.live_events import sequence_taken

pytestmark = pytest.mark.django_db(transaction=True)


def session_headers(user) -> list[tuple[bytes, bytes]]:
    client = Client()
    client.force_login(user)
    return [(b"origin", b"http://localhost"), (b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode())]


def test_fire_acknowledge_resolve_reach_the_socket(fleet, clock, users):
    fleet.add("gpu-1")
    headers = session_headers(users["agent"])  # any signed-in role may watch

    async def scenario():
        socket = WebsocketCommunicator(application, "/ws/alerts/", headers=headers)
        connected, _ = await socket.connect()
        assert connected
        await sequence_taken(socket, "alerts")
        await database_sync_to_async(fleet.disconnect)("gpu-1")
        await database_sync_to_async(evaluate)(now=clock.tick(2))
        fired = await socket.receive_json_from(timeout=10)
        group = await database_sync_to_async(AlertGroup.objects.get)()
        await database_sync_to_async(alert_group_acknowledge)(actor=users["oncall"], group=group, note="on it")
        acked = await socket.receive_json_from(timeout=10)
        await database_sync_to_async(fleet.connect)("gpu-1", at=clock.tick(2))
        await database_sync_to_async(evaluate)(now=clock.now)
        resolved = await socket.receive_json_from(timeout=10)
        await socket.disconnect()
        return fired, acked, resolved, group.pk

    fired, acked, resolved, group_id = async_to_sync(scenario)()
    assert fired["type"] == "alerts.changed" and fired["notify"] == [group_id]
    # Sent by a pass that got through: evaluation runs. An acknowledgement reads the lease (no pass completed here).
    assert fired["evaluator"] == {"is_running": True, "text": ""}
    assert acked["evaluator"]["is_running"] is False
    [alert] = fired["alerts"]
    assert (alert["rule"], alert["name"], alert["state"], alert["severity"]) == (
        "node-lost",
        "gpu-1",
        "firing",
        "critical",
    )
    assert alert["runbook_url"] == "/runbooks/node-lost/"
    [incident] = fired["incidents"]
    assert (incident["id"], incident["state"], incident["pool"]) == (group_id, "firing", "prod-main")
    assert [a["name"] for a in incident["affected"]] == ["gpu-1"]
    assert acked["incidents"][0]["acknowledged_by"] == "oncall" and acked["notify"] == []
    assert resolved["incidents"][0]["state"] == "resolved"
    assert resolved["alerts"][0]["state"] == "resolved"


def test_the_socket_refuses_anonymous_browsers(db):
    async def scenario():
        socket = WebsocketCommunicator(application, "/ws/alerts/", headers=[(b"origin", b"http://localhost")])
        return await socket.connect()

    assert async_to_sync(scenario)() == (False, FORBIDDEN)
