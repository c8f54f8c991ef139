"""Every WebSocket consumer hands each message to its handler without Channels' per-message thread hop."""

import asyncio

import pytest
from channels.consumer import AsyncConsumer
from django.urls import URLPattern

from controlplane.lib.consumers import EventConsumer
from controlplane.routing import websocket_urlpatterns


def consumer_classes():
    """The consumer behind each WebSocket route, unwrapped from its middleware (`application`, `inner`)."""
    found = []
    for pattern in websocket_urlpatterns:
        assert isinstance(pattern, URLPattern), pattern
        app = pattern.callback
        while not hasattr(app, "consumer_class"):
            app = getattr(app, "inner", None) or app.application
        found.append(app.consumer_class)
    return found


def test_every_routed_consumer_is_an_event_consumer():
    classes = consumer_classes()
    assert len(classes) >= 8, classes
    assert [c.__name__ for c in classes if not issubclass(c, EventConsumer)] == []


def test_dispatch_calls_the_handler_with_no_connection_check(monkeypatch):
    """Channels' own dispatch would call aclose_old_connections first; ours never does (it would hop threads)."""
    checks = []

    async def counted():
        checks.append(1)

    monkeypatch.setattr("channels.consumer.aclose_old_connections", counted)
    seen = []

    class Probe(EventConsumer):
        async def probe_event(self, event):
            seen.append(event["n"])

    consumer = Probe()

    async def run():
        for n in range(3):
            await consumer.dispatch({"type": "probe.event", "n": n})
        with pytest.raises(ValueError, match=r"No handler for message type probe\.unknown"):
            await consumer.dispatch({"type": "probe.unknown"})
        # The same probe through Channels' dispatch does check: the counter above is the one it calls.
        await AsyncConsumer.dispatch(consumer, {"type": "probe.event", "n": 9})

    asyncio.run(run())
    assert seen == [0, 1, 2, 9] and checks == [1]
