"""Live intent model training progress for the dashboard."""

from controlplane.accounts.roles import Action
from controlplane.lib import realtime
from controlplane.lib.consumers import EventConsumer

FORBIDDEN = 4403


class IntentModelEventsConsumer(EventConsumer):
    """Joins the intent models group; any signed-in role may watch."""

    async def connect(self):
        user = self.scope.get("user")
        if not (user and user.is_authenticated and user.can(Action.VIEW)):
            await self.close(code=FORBIDDEN)
            return
        self.group = realtime.intent_models_group()
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    async def disconnect(self, code):
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def intent_model_progress(self, event):
        await self.send_json(event)
