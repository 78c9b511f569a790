"""URL patterns for conversations, their messages, sharing and events (see api/urls.py)."""

from __future__ import annotations

from django.urls import URLPattern, path

from ..views import conversations as views
from ..views import transcripts

urlpatterns: list[URLPattern] = [
    path("conversations/", views.ConversationListView.as_view(), name="conversation-list"),
    path("conversations/<str:conversation_id>/", views.ConversationDetailView.as_view(), name="conversation-detail"),
    path(
        "conversations/<str:conversation_id>/share/", views.ConversationShareView.as_view(), name="conversation-share"
    ),
    # The message list with the whole-thread saves (PUT overwrites, PATCH merges by id) added.
    path("conversations/<str:conversation_id>/messages/", transcripts.MessageThreadView.as_view(), name="message-list"),
    path(
        "conversations/<str:conversation_id>/messages/<str:message_id>/",
        views.MessageDetailView.as_view(),
        name="message-detail",
    ),
    path("conversations/<str:conversation_id>/events/", views.EventListView.as_view(), name="event-list"),
]
