"""Authentication without a user table, for the server on the in-memory family (tests/realtime/memory_server_settings.py).

A request names its user in the ``X-Test-User`` header; the user is no Django
user (no primary key), so the tickets it is issued carry no account to check
against the user table when they are spent.
"""

from __future__ import annotations

from typing import Any

from rest_framework.authentication import BaseAuthentication

from agent_persistence.scope import Scope

HEADER = "HTTP_X_TEST_USER"


class HeaderUser:
    """A signed-in user who exists only in the request's header."""

    is_authenticated = True
    is_active = True
    pk = None

    def __init__(self, username: str) -> None:
        self.username = username


class HeaderAuthentication(BaseAuthentication):
    def authenticate(self, request: Any) -> tuple[HeaderUser, None] | None:
        username = request.META.get(HEADER)
        return (HeaderUser(username), None) if username else None


def header_scope(request: Any) -> Scope | None:
    """Tenant "" and the header's user name (a socket carries none: it is authenticated by its ticket)."""
    user = request.get("user") if isinstance(request, dict) else getattr(request, "user", None)
    username = getattr(user, "username", None) if getattr(user, "is_authenticated", False) else None
    return Scope(tenant="", user=username) if username else None
