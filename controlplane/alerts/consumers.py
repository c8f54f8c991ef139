"""Live alerts for the on-call page: every `alerts.changed` event as it happens."""

from controlplane.accounts.roles import Action
from controlplane.lib import realtime
from controlplane.lib.consumers import EventConsumer

FORBIDDEN = 4403


class AlertEventsConsumer(EventConsumer):
    """Joins the alerts group; any signed-in role may watch."""

    async def connect(self):
        user = self.scope.get("user")
        if not (user and user.is_authenticated and user.can(Action.VIEW)):
            await self.close(code=FORBIDDEN)
            return
        self.group = realtime.alerts_group()
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        await self.send_sequence_taken(self.group)

    async def disconnect(self, code):
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def alerts_changed(self, event):
        await self.send_json(event)
