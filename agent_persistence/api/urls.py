"""The API's URLconf: ``path("api/", include("agent_persistence.api.urls"))``.

Ids in paths are taken as text, so a malformed id answers the same JSON 404 as
an unknown one.
"""

from __future__ import annotations

from django.urls import path

from .routes import conversations, files, oauth, tasks, turns
from .schema import SchemaView

app_name = "agent_persistence"

urlpatterns = [
    *conversations.urlpatterns,
    *turns.urlpatterns,
    *files.urlpatterns,
    *tasks.urlpatterns,
    *oauth.urlpatterns,
    path("schema/", SchemaView.as_view(), name="schema"),
]

from .routes import agui  # noqa: E402 - appended: AG-UI over server-sent events

urlpatterns += agui.urlpatterns
