"""URL patterns for tasks (see api/urls.py)."""

from __future__ import annotations

from django.urls import URLPattern, path

from ..views import tasks as views

urlpatterns: list[URLPattern] = [
    path("tasks/", views.TaskListView.as_view(), name="task-list"),
    path("tasks/<str:task_id>/", views.TaskDetailView.as_view(), name="task-detail"),
    path("tasks/<str:task_id>/comments/", views.TaskCommentView.as_view(), name="task-comments"),
    path("tasks/<str:task_id>/result/", views.TaskResultView.as_view(), name="task-result"),
]
