"""Live pool events through the real ASGI app and the Redis channel layer."""

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.test import Client

from controlplane.asgi import application
from controlplane.nodes.consumers import FORBIDDEN
from controlplane.nodes.exceptions import ProductionGateClosed
from controlplane.nodes.services.pools import pool_publish, pool_rollback
from tests.factories import pools, template_with_versions
from tests.live_events import sequence_taken

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis]

ORIGIN = (b"origin", b"http://localhost")


def session_headers(user=None, origin=ORIGIN) -> list[tuple[bytes, bytes]]:
    """Headers of a browser tab: the dashboard's session cookie (when signed in) and its Origin."""
    headers = [origin]
    if user is not None:
        client = Client()
        client.force_login(user)
        headers.append((b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode()))
    return headers


@pytest.fixture
def world(users):
    _, (v1, v2) = template_with_versions(users["agent"], temperatures=(0.3, 0.2))
    staging, prod = pools(users["sre"])
    return {"v1": v1, "v2": v2, "staging": staging, "prod": prod}


def test_the_channel_layer_is_redis():
    assert type(get_channel_layer()).__name__ == "RedisChannelLayer"


def test_signed_in_user_receives_pool_released_after_a_publish(users, world):
    sre = users["sre"]
    oncall, agent, sre_tab = (session_headers(users[role]) for role in ("oncall", "agent", "sre"))

    async def scenario():
        staging_socket = WebsocketCommunicator(application, "/ws/pools/staging/", headers=oncall)
        fleet_socket = WebsocketCommunicator(application, "/ws/pools/", headers=agent)
        prod_socket = WebsocketCommunicator(application, "/ws/pools/prod-main/", headers=sre_tab)
        for socket in (staging_socket, fleet_socket, prod_socket):
            connected, _ = await socket.connect()
            assert connected
        taken = await sequence_taken(staging_socket, "pool.staging")
        await sequence_taken(fleet_socket, "fleet")
        await sequence_taken(prod_socket, "pool.prod-main")
        await database_sync_to_async(pool_publish)(actor=sre, pool=world["staging"], version=world["v1"], reason="go")
        await database_sync_to_async(pool_publish)(actor=sre, pool=world["staging"], version=world["v2"], reason="v2")
        await database_sync_to_async(pool_rollback)(actor=sre, pool=world["staging"], reason="back")
        staging_events = [await staging_socket.receive_json_from(timeout=5) for _ in range(3)]
        fleet_event = await fleet_socket.receive_json_from(timeout=5)
        assert await prod_socket.receive_nothing(timeout=0.5), "another pool's socket got staging's event"
        for socket in (staging_socket, fleet_socket, prod_socket):
            await socket.disconnect()
        return taken, staging_events, fleet_event

    taken, staging_events, fleet_event = async_to_sync(scenario)()
    first = staging_events[0]
    assert first["type"] == "pool.released"
    assert (first["pool"], first["kind"], first["actor"], first["reason"]) == ("staging", "publish", "sre", "go")
    assert first["version"] == {"template": "chat", "number": 1, "hash": world["v1"].content_hash}
    assert first["previous_version"] is None
    assert [(e["kind"], e["version"]["number"]) for e in staging_events] == [
        ("publish", 1),
        ("publish", 2),
        ("rollback", 1),
    ]
    # The same event on both sockets, each numbered in its own group (controlplane/lib/event_sequence.py).
    assert fleet_event["seq"]["group"] == "fleet" and first["seq"]["group"] == "pool.staging"
    assert [e["seq"]["n"] - first["seq"]["n"] for e in staging_events] == list(range(len(staging_events)))
    # The number the socket was told on subscribing is the one just before its first event: nothing between.
    assert first["seq"]["n"] == taken + 1
    assert {**fleet_event, "seq": None} == {**first, "seq": None}


def test_refused_publish_sends_nothing(users, world):
    headers = session_headers(users["oncall"])

    async def scenario():
        socket = WebsocketCommunicator(application, "/ws/pools/prod-main/", headers=headers)
        assert (await socket.connect())[0]
        await sequence_taken(socket, "pool.prod-main")
        with pytest.raises(ProductionGateClosed):
            await database_sync_to_async(pool_publish)(
                actor=users["sre"], pool=world["prod"], version=world["v1"], reason="skip staging"
            )
        nothing = await socket.receive_nothing(timeout=0.5)
        await socket.disconnect()
        return nothing

    assert async_to_sync(scenario)()


def connect_code(headers) -> tuple[bool, int | None]:
    async def scenario():
        socket = WebsocketCommunicator(application, "/ws/pools/staging/", headers=headers)
        connected, code = await socket.connect()
        if connected:
            await socket.disconnect()
        return connected, code

    return async_to_sync(scenario)()


def test_anonymous_connection_is_refused_with_4403(db):
    assert connect_code(session_headers()) == (False, FORBIDDEN)
    assert FORBIDDEN == 4403


def test_deactivated_user_is_refused(users):
    agent = users["agent"]
    headers = session_headers(agent)
    agent.is_active = False
    agent.save(update_fields=["is_active"])
    assert connect_code(headers) == (False, 4403)


def test_a_foreign_origin_is_refused(users):
    connected, _ = connect_code(session_headers(users["sre"], origin=(b"origin", b"https://evil.example")))
    assert not connected
