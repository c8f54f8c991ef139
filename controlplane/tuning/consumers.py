"""Live progress of tuning studies for the dashboard: one study's page, or the study list."""

from controlplane.accounts.roles import Action
from controlplane.lib.consumers import EventConsumer
from controlplane.tuning.realtime import studies_group, study_group

FORBIDDEN = 4403


class TuningEventsConsumer(EventConsumer):
    """Joins one study's group (`ws/tuning/<id>/`) or the list's (`ws/tuning/`); any signed-in role may watch."""

    async def connect(self):
        user = self.scope.get("user")
        if not (user and user.is_authenticated and user.can(Action.VIEW)):
            await self.close(code=FORBIDDEN)
            return
        study = self.scope["url_route"]["kwargs"].get("study")
        self.group = study_group(study) if study is not None else studies_group()
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    async def disconnect(self, code):
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def tuning_progress(self, event):
        await self.send_json(event)
