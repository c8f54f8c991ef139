"""The base of every WebSocket consumer here: Channels' JSON consumer without a thread hop per message.

Since Channels 4.2, `AsyncConsumer.dispatch` runs `aclose_old_connections()` (a `sync_to_async` call to
`django.db.close_old_connections`) before every message it hands to a handler: one hop to the sync thread and back
for each heartbeat, sample, ACK and pushed event. Consumers here reach the database only through
`database_sync_to_async`, which closes stale connections itself, in the thread that runs the query, before and after
each call; the hop in `dispatch` adds nothing to that and only costs. In a daphne process holding 500 agents it was
three quarters of the agent consumer's time while a publish fanned out (py-spy, bench/rollout_fanout.py).

So a consumer that derives from `EventConsumer` must never touch the ORM on the event loop (Django refuses that
anyway) nor through plain `sync_to_async`; `tests/lib/test_consumers.py` checks every consumer derives from it.
"""

from channels.consumer import get_handler_name
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from controlplane.lib import event_sequence


class EventConsumer(AsyncJsonWebsocketConsumer):
    """An `AsyncJsonWebsocketConsumer` whose `dispatch` calls the handler directly."""

    async def dispatch(self, message):
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)

    async def send_sequence_taken(self, group: str) -> None:
        """Once subscribed to a numbered group: the number taken so far, so the page can tell whether it missed any
        event sent before the subscription (after its render, or while its socket was away)."""
        n = await event_sequence.current_number_async(group)
        if n is not None:
            await self.send_json({"type": "sequence.taken", "seq": {"group": group, "n": n}})
