"""URL patterns of the run lifecycle: subagent runs, a run's interrupts, cancelling one interrupt (see api/urls.py)."""

from __future__ import annotations

from django.urls import URLPattern, path

from ..views import runs

urlpatterns: list[URLPattern] = [
    path("runs/<str:run_id>/children/", runs.RunChildrenView.as_view(), name="run-children"),
    path("runs/<str:run_id>/interrupts/", runs.RunInterruptsView.as_view(), name="run-interrupts"),
    path("interrupts/<str:interrupt_id>/cancel/", runs.CancelInterruptView.as_view(), name="interrupt-cancel"),
]
