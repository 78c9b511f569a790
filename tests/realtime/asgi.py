"""ASGI application of the websocket tests: HTTP through Django, websockets with Channels' auth.

Served by the end-to-end tests (uvicorn, two processes) with
``DJANGO_SETTINGS_MODULE=tests.realtime.server_settings``. ``GET
/_realtime/stats`` answers this process's realtime state and the number of
SQL statements it ran (:mod:`tests.realtime.instrument`), so a test can see
that departed sockets left nothing behind.
"""

from __future__ import annotations

import json
import os
from typing import Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.realtime.server_settings")

from django.core.asgi import get_asgi_application  # noqa: E402

http_application = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from agent_persistence.realtime.lifespan import lifespan  # noqa: E402
from agent_persistence.realtime.routing import websocket_urlpatterns  # noqa: E402
from tests.realtime.instrument import QueryCounter, stats  # noqa: E402

queries = QueryCounter().install()
STATS_PATH = "/_realtime/stats"


async def http_with_stats(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["path"] != STATS_PATH:
        await http_application(scope, receive, send)
        return
    body = json.dumps(stats(queries)).encode()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body})


websocket_application = AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
application = ProtocolTypeRouter({"http": http_with_stats, "websocket": websocket_application, "lifespan": lifespan})
