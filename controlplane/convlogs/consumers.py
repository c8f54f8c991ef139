"""Live conversation-log analysis progress for the dashboard."""

from controlplane.accounts.roles import Action
from controlplane.lib import realtime
from controlplane.lib.consumers import EventConsumer

FORBIDDEN = 4403


class LogAnalysisEventsConsumer(EventConsumer):
    """Joins the conversation logs group; any signed-in role may watch."""

    async def connect(self):
        user = self.scope.get("user")
        if not (user and user.is_authenticated and user.can(Action.VIEW)):
            await self.close(code=FORBIDDEN)
            return
        self.group = realtime.conversation_logs_group()
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    async def disconnect(self, code):
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def log_analysis_progress(self, event):
        await self.send_json(event)
