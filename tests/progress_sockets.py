"""Live progress over the real ASGI app, as replay and tuning pages watch it: a page's socket, the list's, and
another page's that must hear nothing; and an anonymous browser's refusal."""

from collections.abc import Callable

from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator

from controlplane.asgi import application


def events_on_change(headers: list, page: str, listing: str, other: str, change: Callable[[], object]):
    """Connect to the three paths, make `change` (sync, in the database thread), and return the events the page and
    the list got and whether the other page heard nothing."""

    async def scenario():
        sockets = [WebsocketCommunicator(application, path, headers=headers) for path in (page, listing, other)]
        for socket in sockets:
            assert (await socket.connect())[0]
        await database_sync_to_async(change)()
        events = [await sockets[0].receive_json_from(timeout=5), await sockets[1].receive_json_from(timeout=5)]
        nothing = await sockets[2].receive_nothing(timeout=0.3)
        for socket in sockets:
            await socket.disconnect()
        return events, nothing

    return async_to_sync(scenario)()


def anonymous_connect(path: str):
    """What the app answers an anonymous browser's socket: (accepted, close code)."""

    async def scenario():
        socket = WebsocketCommunicator(application, path, headers=[(b"origin", b"http://localhost")])
        return await socket.connect()

    return async_to_sync(scenario)()
