"""ASGI entry point: HTTP through Django, WebSockets through Channels, one server for both."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
django_asgi_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from controlplane.lib.body_limit import BodySizeLimitMiddleware  # noqa: E402
from controlplane.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        # Oversized bodies are answered 413 here, before Django spools them (controlplane/lib/body_limit.py).
        "http": BodySizeLimitMiddleware(django_asgi_app),
        "websocket": URLRouter(websocket_urlpatterns),
    }
)
