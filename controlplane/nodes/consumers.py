"""Live pool events for the dashboard: releases and node changes (rollout progress) as they happen."""

from controlplane.accounts.roles import Action
from controlplane.lib import realtime
from controlplane.lib.consumers import EventConsumer

FORBIDDEN = 4403


class PoolEventsConsumer(EventConsumer):
    """Joins the fleet group, or one pool's group when the URL names a pool."""

    async def connect(self):
        user = self.scope.get("user")
        if not (user and user.is_authenticated and user.can(Action.VIEW)):
            await self.close(code=FORBIDDEN)
            return
        pool = self.scope["url_route"]["kwargs"].get("pool")
        self.group = realtime.pool_group(pool) if pool else realtime.fleet_group()
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        await self.send_sequence_taken(self.group)

    async def disconnect(self, code):
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def pool_released(self, event):
        await self.send_json(event)

    async def node_updated(self, event):
        await self.send_json(event)

    async def nodes_updated(self, event):
        await self.send_json(event)

    async def node_command_changed(self, event):
        await self.send_json(event)

    async def rollout_updated(self, event):
        await self.send_json(event)
