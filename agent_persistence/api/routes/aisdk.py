"""URL patterns of the AI SDK endpoints (see api/urls.py).

No trailing slash: ``useChat``'s transport posts to its ``api`` and reconnects to ``api + "/<id>/stream"``.
"""

from __future__ import annotations

from django.urls import URLPattern, path

from ..views import aisdk

urlpatterns: list[URLPattern] = [
    path("aisdk/chat", aisdk.AiSdkChatView.as_view(), name="aisdk-chat"),
    path("aisdk/chat/<str:conversation_id>/stream", aisdk.AiSdkChatStreamView.as_view(), name="aisdk-chat-stream"),
]
