"""URL patterns for activity rows and reconstruct-for-reload (see api/urls.py)."""

from __future__ import annotations

from django.urls import URLPattern, path

from ..views import activities as views

urlpatterns: list[URLPattern] = [
    path("conversations/<str:conversation_id>/activities/", views.ActivityListView.as_view(), name="conversation-activities"),
    path("conversations/<str:conversation_id>/reconstruct/", views.ReconstructView.as_view(), name="conversation-reconstruct"),
]
