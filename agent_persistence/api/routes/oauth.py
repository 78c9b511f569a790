"""URL patterns for MCP OAuth (see api/urls.py and docs/reference/api/oauth.md)."""

from __future__ import annotations

from django.urls import path

from ..views.oauth import AuthorizeView, CallbackView, IntegrationListView, IntegrationView

urlpatterns = [
    path("mcp/integrations/", IntegrationListView.as_view(), name="mcp-integrations"),
    path("mcp/integrations/<str:server>/", IntegrationView.as_view(), name="mcp-integration"),
    path("mcp/integrations/<str:server>/authorize/", AuthorizeView.as_view(), name="mcp-authorize"),
    path("mcp/oauth/callback/", CallbackView.as_view(), name="mcp-callback"),
]
