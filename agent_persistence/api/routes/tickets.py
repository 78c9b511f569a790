"""URL patterns for websocket tickets (see api/urls.py)."""

from __future__ import annotations

from django.urls import URLPattern, path

from ..views import tickets as views

urlpatterns: list[URLPattern] = [
    path("ws-ticket/", views.WebsocketTicketView.as_view(), name="ws-ticket"),
    path("conversations/<str:conversation_id>/ws-ticket/", views.ConversationWebsocketTicketView.as_view(), name="conversation-ws-ticket"),
]
