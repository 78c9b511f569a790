"""The agents' token accessor: a valid access token for (tenant, user, server), or why not.

::

    from agent_persistence.oauth.tokens import get_access_token
    token = get_access_token(Scope(tenant, user), "github")   # -> str
    headers = {"Authorization": f"Bearer {token}"}

The token is refreshed first when it expires within ``OAUTH_REFRESH_MARGIN``
seconds (one refresh at a time across processes). With no usable token the
accessor raises :class:`~agent_persistence.oauth.exceptions.AuthorizationRequired`,
whose ``authorize_url`` is the API path that starts an authorization.
"""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django.urls import NoReverseMatch, reverse

from ..scope import Scope
from .repository import Tokens
from .store import integration_store


def authorize_path(server: str) -> str | None:
    """The path of the endpoint that starts an authorization of ``server`` (POST), if routed."""
    try:
        return reverse("agent_persistence:mcp-authorize", kwargs={"server": server})
    except NoReverseMatch:
        return None


def get_tokens(scope: Scope, server: str) -> Tokens:
    """Valid :class:`~agent_persistence.oauth.repository.Tokens` (access token, type, scope, expiry)."""
    return integration_store().access_token(scope, server, authorize_url=authorize_path(server))


def get_access_token(scope: Scope, server: str) -> str:
    return get_tokens(scope, server).access_token


async def aget_access_token(scope: Scope, server: str) -> str:
    return await sync_to_async(get_access_token)(scope, server)


async def aget_tokens(scope: Scope, server: str) -> Tokens:
    return await sync_to_async(get_tokens)(scope, server)
