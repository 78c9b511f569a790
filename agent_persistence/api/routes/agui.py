"""URL patterns of the AG-UI endpoint (see api/urls.py)."""

from __future__ import annotations

from django.urls import URLPattern, path

from ..views import agui

urlpatterns: list[URLPattern] = [
    path("conversations/<str:conversation_id>/agui/", agui.AgUiStreamView.as_view(), name="conversation-agui"),
]
