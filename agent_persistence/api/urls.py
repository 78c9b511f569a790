"""The API's URLconf: ``path("api/", include("agent_persistence.api.urls"))``.

Ids in paths are taken as text, so a malformed id answers the same JSON 404 as
an unknown one.
"""

from __future__ import annotations

from django.urls import path

from .routes import activities, agui, artifacts, conversations, files, oauth, runs, tasks, tickets, turns
from .schema import SchemaView

app_name = "agent_persistence"

urlpatterns = [
    *conversations.urlpatterns,
    *turns.urlpatterns,
    *files.urlpatterns,
    *tasks.urlpatterns,
    *oauth.urlpatterns,
    *runs.urlpatterns,
    *activities.urlpatterns,
    *tickets.urlpatterns,
    *artifacts.urlpatterns,
    *agui.urlpatterns,
    path("schema/", SchemaView.as_view(), name="schema"),
]

