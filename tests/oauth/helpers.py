"""Steps the MCP OAuth tests share: the whole dance, through the API and the local server."""

from __future__ import annotations

from typing import Any

from rest_framework.test import APIClient

from .server import LocalOAuthServer


def start(api: APIClient, server: str = "docs") -> dict[str, Any]:
    response = api.post(f"/api/mcp/integrations/{server}/authorize/", {}, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def connect(api: APIClient, browser: APIClient, oauth_server: LocalOAuthServer, server: str = "docs") -> Any:
    """Start an authorization, let the browser authorize it, and call our callback."""
    started = start(api, server)
    params = oauth_server.authorize(started["authorization_url"])
    response = browser.get("/api/mcp/oauth/callback/", params)
    assert response.status_code == 200, response.content
    return response
