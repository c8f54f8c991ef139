"""Live figures for the dashboard's charts: the fleet, one pool, or one node."""

import json

from django.conf import settings

from controlplane.accounts.roles import Action
from controlplane.lib import realtime
from controlplane.lib.consumers import EventConsumer
from controlplane.metrics.coalescing import LiveSampleCoalescer, receipt_seq

FORBIDDEN = 4403
# A receipt is a few dozen bytes; anything longer is not one and is not parsed.
MAX_RECEIPT_CHARS = 200


class MetricsConsumer(EventConsumer):
    """Joins the fleet's metrics group, or the pool's or node's the URL names; any signed-in role may watch.

    Samples go through the connection's coalescer (`controlplane/metrics/coalescing.py`): sent while the browser
    confirms what it reads, otherwise thinned to the newest per node, pool and the fleet."""

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
        self.coalescer = LiveSampleCoalescer(window=settings.METRICS_LIVE_UNCONFIRMED_FRAMES)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    async def disconnect(self, code):
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive(self, text_data=None, bytes_data=None):
        if text_data is None or len(text_data) > MAX_RECEIPT_CHARS:
            return
        try:
            seq = receipt_seq(json.loads(text_data))
        except ValueError:
            return
        if seq is not None:
            self.coalescer.confirm(seq)
            await self._send_ready()

    async def metrics_sample(self, event):
        self.coalescer.offer(event)
        await self._send_ready()

    async def _send_ready(self):
        for frame in self.coalescer.frames_ready():
            await self.send_json(frame)
