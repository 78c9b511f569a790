"""URL patterns for files (see api/urls.py)."""

from __future__ import annotations

from django.urls import URLPattern, path

from ..views import files as views

urlpatterns: list[URLPattern] = [
    path("conversations/<str:conversation_id>/files/", views.ConversationFileListView.as_view(), name="file-list"),
    path("files/<str:file_id>/", views.FileDetailView.as_view(), name="file-detail"),
    path("files/<str:file_id>/content/", views.FileContentView.as_view(), name="file-content"),
]
