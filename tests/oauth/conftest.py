"""Fixtures of the MCP OAuth tests: a local authorization server and settings naming it."""

from __future__ import annotations

from typing import Any, Iterator

import pytest
from rest_framework.test import APIClient

from agent_persistence.oauth.servers import forget_metadata

from .server import LocalOAuthServer

CALLBACK = "http://testserver/api/mcp/oauth/callback/"


@pytest.fixture
def oauth_server() -> Iterator[LocalOAuthServer]:
    with LocalOAuthServer(
        static_clients={
            "static-basic": {"redirect_uris": [CALLBACK], "token_endpoint_auth_method": "client_secret_basic", "client_secret": "static-basic-secret-0123456789"},
            "static-post": {"redirect_uris": [CALLBACK], "token_endpoint_auth_method": "client_secret_post", "client_secret": "static-post-secret-0123456789"},
        }
    ) as server:
        yield server
    forget_metadata()


@pytest.fixture
def mcp_settings(settings: Any, oauth_server: LocalOAuthServer) -> Any:
    """Three servers on the local authorization server: discovered + registered, two static clients."""
    base = oauth_server.base_url
    settings.AGENT_PERSISTENCE = {
        **settings.AGENT_PERSISTENCE,
        "MCP_SERVERS": {
            "docs": {"issuer": base, "scopes": ["read", "write"], "resource": "https://mcp.example.test/docs"},
            "basic": {
                "authorization_endpoint": f"{base}/authorize",
                "token_endpoint": f"{base}/token",
                "client_id": "static-basic",
                "client_secret": "static-basic-secret-0123456789",
            },
            "post": {
                "issuer": base,
                "client_id": "static-post",
                "client_secret": "static-post-secret-0123456789",
                "token_endpoint_auth_method": "client_secret_post",
            },
        },
    }
    return settings


@pytest.fixture
def user(django_user_model: Any) -> Any:
    return django_user_model.objects.create_user(username="alice", password="pw")


@pytest.fixture
def api(user: Any) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.fixture
def browser() -> APIClient:
    """The user's browser coming back from the authorization server: no API credentials."""
    return APIClient()
