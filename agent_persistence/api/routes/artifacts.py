"""URL patterns for artifacts and generation runs (see api/urls.py)."""

from __future__ import annotations

from django.urls import URLPattern, path

from ..views import artifacts as views

urlpatterns: list[URLPattern] = [
    path(
        "conversations/<str:conversation_id>/artifacts/",
        views.ConversationArtifactListView.as_view(),
        name="conversation-artifacts",
    ),
    path("runs/<str:run_id>/artifacts/", views.RunArtifactListView.as_view(), name="run-artifacts"),
    path("artifacts/<str:artifact_id>/", views.ArtifactDetailView.as_view(), name="artifact-detail"),
    path("artifacts/<str:artifact_id>/content/", views.ArtifactContentView.as_view(), name="artifact-content"),
    path("generation-runs/", views.GenerationRunListView.as_view(), name="generation-run-list"),
    path("generation-runs/latest/", views.GenerationRunLatestView.as_view(), name="generation-run-latest"),
    path(
        "generation-runs/<str:generation_run_id>/",
        views.GenerationRunDetailView.as_view(),
        name="generation-run-detail",
    ),
]
