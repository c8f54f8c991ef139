"""Live figures for the dashboard's charts: the fleet, one pool, or one node."""

from channels.generic.websocket import AsyncJsonWebsocketConsumer

from controlplane.accounts.roles import Action
from controlplane.lib import realtime

FORBIDDEN = 4403


class MetricsConsumer(AsyncJsonWebsocketConsumer):
    """Joins the fleet's metrics group, or the pool's or node's the URL names; any signed-in role may watch."""

    async def connect(self):
        user = self.scope.get("user")
        if not (user and user.is_authenticated and user.can(Action.VIEW)):
            await self.close(code=FORBIDDEN)
            return
        kwargs = self.scope["url_route"]["kwargs"]
        if "node" in kwargs:
            self.group = realtime.metrics_node_group(kwargs["node"])
        elif "pool" in kwargs:
            self.group = realtime.metrics_pool_group(kwargs["pool"])
        else:
            self.group = realtime.metrics_fleet_group()
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    async def disconnect(self, code):
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def metrics_sample(self, event):
        await self.send_json(event)
