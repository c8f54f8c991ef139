"""Live progress of replay runs for the dashboard: one run's page, or the run list."""

from controlplane.accounts.roles import Action
from controlplane.lib.consumers import EventConsumer
from controlplane.replays.realtime import replay_group, replays_group

FORBIDDEN = 4403


class ReplayEventsConsumer(EventConsumer):
    """Joins one run's group (`ws/replays/<id>/`) or the list's (`ws/replays/`); any signed-in role may watch."""

    async def connect(self):
        user = self.scope.get("user")
        if not (user and user.is_authenticated and user.can(Action.VIEW)):
            await self.close(code=FORBIDDEN)
            return
        run = self.scope["url_route"]["kwargs"].get("run")
        self.group = replay_group(run) if run is not None else replays_group()
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    async def disconnect(self, code):
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def replay_progress(self, event):
        await self.send_json(event)
