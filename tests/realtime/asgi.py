"""ASGI application of the websocket tests: HTTP through Django, websockets with Channels' auth.

Served by the end-to-end tests (uvicorn, two processes) with
``DJANGO_SETTINGS_MODULE=tests.realtime.server_settings``.
"""

from __future__ import annotations

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.realtime.server_settings")

from django.core.asgi import get_asgi_application  # noqa: E402

http_application = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from agent_persistence.realtime.routing import websocket_urlpatterns  # noqa: E402

websocket_application = AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
application = ProtocolTypeRouter({"http": http_application, "websocket": websocket_application})
