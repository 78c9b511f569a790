"""URL patterns for turns, runs and interrupts (see api/urls.py)."""

from __future__ import annotations

from django.urls import URLPattern, path

from ..views import turns

urlpatterns: list[URLPattern] = [
    path("conversations/<str:conversation_id>/turns/", turns.StartTurnView.as_view(), name="turn-start"),
    path("conversations/<str:conversation_id>/turns/resume/", turns.ResumeTurnView.as_view(), name="turn-resume"),
    path("conversations/<str:conversation_id>/turns/cancel/", turns.CancelTurnView.as_view(), name="turn-cancel"),
    path("conversations/<str:conversation_id>/stream/", turns.StreamStatusView.as_view(), name="conversation-stream"),
    path("conversations/<str:conversation_id>/runs/", turns.ConversationRunsView.as_view(), name="conversation-runs"),
    path(
        "conversations/<str:conversation_id>/interrupts/",
        turns.InterruptsView.as_view(),
        name="conversation-interrupts",
    ),
    path("runs/<str:run_id>/", turns.RunDetailView.as_view(), name="run-detail"),
]
