"""The API's URLconf: ``path("api/", include("agent_persistence.api.urls"))``.

Ids in paths are taken as text, so a malformed id answers the same JSON 404 as
an unknown one. An id holding ``%2F`` (a slash once decoded) matches no route:
the last pattern answers the JSON 404 for any path ending in ``/`` under one of
the API's resources, so no id ever gets Django's HTML 404 page.
"""

from __future__ import annotations

import re

from django.urls import path, re_path

from .routes import activities, agui, aisdk, artifacts, conversations, files, oauth, runs, tasks, tickets, turns
from .schema import SchemaView
from .views.base import UnknownResourceView

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
    *aisdk.urlpatterns,
    path("schema/", SchemaView.as_view(), name="schema"),
]

#: The first segments of the routes that take an id ("conversations", "mcp/integrations" ...).
RESOURCES = sorted({str(pattern.pattern).split("/<", 1)[0] for pattern in urlpatterns if "/<" in str(pattern.pattern)})

urlpatterns.append(
    re_path(
        r"^(?:%s)/.+/\Z" % "|".join(re.escape(resource) for resource in RESOURCES),
        UnknownResourceView.as_view(),
        name="unknown-resource",
    )
)

