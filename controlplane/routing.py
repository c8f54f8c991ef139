"""Every WebSocket route of the control plane."""

from django.urls import path

from controlplane.nodes.consumers import PoolEventsConsumer

websocket_urlpatterns = [
    path("ws/pools/", PoolEventsConsumer.as_asgi()),
    path("ws/pools/<slug:pool>/", PoolEventsConsumer.as_asgi()),
]
