"""Websocket routes; include them in the host's ``URLRouter``::

    from agent_persistence.realtime.routing import websocket_urlpatterns
"""

from __future__ import annotations

from django.urls import path

from .consumers import ConversationConsumer

websocket_urlpatterns = [
    path("ws/conversations/<str:conversation_id>/", ConversationConsumer.as_asgi()),
]
