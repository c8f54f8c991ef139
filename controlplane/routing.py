"""Every WebSocket route of the control plane.

Browsers sign in with their session cookie and must come from an allowed origin; agents are not
browsers (no Origin, no cookie) and authenticate with their node token instead.
"""

from channels.auth import AuthMiddlewareStack
from channels.security.websocket import AllowedHostsOriginValidator
from django.urls import path

from controlplane.alerts.consumers import AlertEventsConsumer
from controlplane.convlogs.consumers import LogAnalysisEventsConsumer
from controlplane.datasets.consumers import IntentModelEventsConsumer
from controlplane.metrics.consumers import MetricsConsumer
from controlplane.nodes.agent_consumer import AgentConsumer
from controlplane.nodes.consumers import PoolEventsConsumer
from controlplane.replays.consumers import ReplayEventsConsumer


def for_browsers(consumer):
    return AllowedHostsOriginValidator(AuthMiddlewareStack(consumer.as_asgi()))


websocket_urlpatterns = [
    path("ws/agent/", AgentConsumer.as_asgi()),
    path("ws/pools/", for_browsers(PoolEventsConsumer)),
    path("ws/pools/<slug:pool>/", for_browsers(PoolEventsConsumer)),
    path("ws/intent-models/", for_browsers(IntentModelEventsConsumer)),
    path("ws/conversation-logs/", for_browsers(LogAnalysisEventsConsumer)),
    path("ws/alerts/", for_browsers(AlertEventsConsumer)),
    path("ws/replays/", for_browsers(ReplayEventsConsumer)),
    path("ws/replays/<int:run>/", for_browsers(ReplayEventsConsumer)),
    path("ws/metrics/fleet/", for_browsers(MetricsConsumer)),
    path("ws/metrics/pools/<slug:pool>/", for_browsers(MetricsConsumer)),
    path("ws/metrics/nodes/<slug:node>/", for_browsers(MetricsConsumer)),
]
