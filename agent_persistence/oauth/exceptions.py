"""Errors of the MCP OAuth flow, each a domain error with a stable ``code``.

None carries a secret: not a token, a verifier, a state or a client secret.
"""

from __future__ import annotations

from typing import Any

from ..exceptions import AgentPersistenceError, Gone, NotFound, Validation


class UnknownServer(NotFound):
    code = "unknown_server"
    default_message = "No MCP server of that name is configured."


class InvalidState(Validation):
    """The callback's state names no pending authorization (unknown, or already used)."""

    code = "invalid_state"
    default_message = "The authorization state is unknown or was already used."


class AuthorizationExpired(Gone):
    code = "authorization_expired"
    default_message = "The authorization took too long; start it again."


class AuthorizationDenied(Validation):
    """The authorization server redirected back with an ``error`` parameter."""

    code = "authorization_denied"
    default_message = "The authorization server refused the authorization."


class OAuthServerError(AgentPersistenceError):
    """An authorization server answered with an error, a 5xx, garbage, or not at all.

    ``details`` hold the HTTP status and the OAuth ``error`` code when there is
    one, never the body. The API answers 502.
    """

    code = "oauth_server_error"
    default_message = "The authorization server did not answer as expected."


class SecretUnreadable(AgentPersistenceError):
    """A stored secret does not decrypt with any configured key (tampered, truncated, key lost).

    The record is left as it is: restore the key, or disconnect and authorize again.
    """

    code = "secret_unreadable"
    default_message = "A stored OAuth secret cannot be decrypted with the configured keys."


class AuthorizationRequired(AgentPersistenceError):
    """No usable token for (tenant, user, server): the user must authorize (again).

    ``details["authorize_url"]`` is the API path that starts an authorization
    (POST), when the app's URLs are installed.
    """

    code = "authorization_required"
    default_message = "The user has not authorized this MCP server."

    def __init__(self, message: str | None = None, *, server: str, authorize_url: str | None, **details: Any) -> None:
        super().__init__(message, server=server, authorize_url=authorize_url, **details)
        self.server = server
        self.authorize_url = authorize_url
