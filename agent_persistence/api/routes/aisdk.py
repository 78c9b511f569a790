"""URL patterns of the AI SDK endpoints (see api/urls.py).

No trailing slash: ``useChat``'s transport posts to its ``api`` and reconnects to ``api + "/<id>/stream"``.
Any other path under ``aisdk/chat/`` (an id holding ``%2F``, a trailing slash) is the API's JSON 404,
not a redirect by ``APPEND_SLASH``.
"""

from __future__ import annotations

from django.urls import URLPattern, path, re_path

from ..views import aisdk
from ..views.base import UnknownResourceView

urlpatterns: list[URLPattern] = [
    path("aisdk/chat", aisdk.AiSdkChatView.as_view(), name="aisdk-chat"),
    path("aisdk/chat/<str:conversation_id>/stream", aisdk.AiSdkChatStreamView.as_view(), name="aisdk-chat-stream"),
    re_path(r"^aisdk/chat/.*\Z", UnknownResourceView.as_view(), name="unknown-resource"),
]
