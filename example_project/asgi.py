"""ASGI entry point of the example project (HTTP through Django, websockets through Channels)."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")

from django.core.asgi import get_asgi_application  # noqa: E402

django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from agent_persistence.realtime.lifespan import lifespan  # noqa: E402
from agent_persistence.realtime.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
        # On SIGTERM the server drains: turns that end within SHUTDOWN_GRACE end here, the others are handed off.
        "lifespan": lifespan,
    }
)
