"""The MCP OAuth endpoints: list integrations, start an authorization, the callback, disconnect.

Routed by ``agent_persistence/api/routes/oauth.py``; documented in
``docs/reference/api/oauth.md``. They live in ``api/`` (the HTTP edge), not in
``oauth/``: the OAuth core (store, repository, client) knows nothing of DRF,
and imports flow one way, ``api`` -> ``oauth``. No response carries a token, verifier, state
or client secret, except the authorization URL, which carries the state the
browser must bring back.
"""

from __future__ import annotations

from typing import Any

from django.urls import reverse
from drf_spectacular.utils import OpenApiParameter
from rest_framework import serializers, status
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response

from ... import json_policy
from ...conf import app_settings
from ...exceptions import Validation
from ...oauth.exceptions import OAuthServerError, SecretUnreadable
from ...oauth.store import integration_store
from ..errors import error_body
from ..schema import extend_schema
from ..serializers.base import StrictSerializer, error_responses
from .base import ScopedAPIView


INTEGRATION_STATUSES = ["connected", "expired", "pending", "disconnected", "unreadable"]


class IntegrationStatusSerializer(serializers.Serializer):
    server = serializers.CharField()
    status = serializers.ChoiceField(choices=INTEGRATION_STATUSES)
    scope = serializers.CharField(allow_null=True)
    expires_at = serializers.DateTimeField(allow_null=True, help_text="When the access token expires.")
    pending_expires_at = serializers.DateTimeField(allow_null=True, help_text="When a started authorization lapses.")
    updated_at = serializers.DateTimeField(allow_null=True)


class AuthorizeInputSerializer(StrictSerializer):
    """No fields: the redirect URI is the app's own (``OAUTH_REDIRECT_URI`` or the callback route)."""


class AuthorizationStartSerializer(serializers.Serializer):
    server = serializers.CharField()
    authorization_url = serializers.URLField(help_text="Send the user's browser here.")
    expires_at = serializers.DateTimeField()


class CallbackResultSerializer(serializers.Serializer):
    server = serializers.CharField()
    status = serializers.CharField()


def storable(server: str) -> bool:
    """Whether a column can hold the server name of the path (no NUL, no lone surrogate)."""
    try:
        json_policy.check_text(server, "server")
    except Validation:
        return False
    return True


def redirect_uri_for(request: Request) -> str:
    configured = app_settings.OAUTH_REDIRECT_URI
    if configured:
        return configured
    return request.build_absolute_uri(reverse("agent_persistence:mcp-callback"))


class OAuthServerErrorMixin:
    """502 when an authorization server fails; 409 when a stored secret does not decrypt.

    (The other errors use the app's mapping.)
    """

    def handle_exception(self, exc: Exception) -> Response:
        if isinstance(exc, OAuthServerError):
            return Response(exc.as_dict(), status=status.HTTP_502_BAD_GATEWAY)
        if isinstance(exc, SecretUnreadable):
            return Response(exc.as_dict(), status=status.HTTP_409_CONFLICT)
        return super().handle_exception(exc)  # type: ignore[misc]


class IntegrationListView(ScopedAPIView):
    """The caller's MCP integrations: one status per configured server, never a secret."""

    @extend_schema(responses={200: IntegrationStatusSerializer(many=True), **error_responses(401, 403)})
    def get(self, request: Request) -> Response:
        statuses = integration_store().list_statuses(self.scope)
        return Response(IntegrationStatusSerializer(statuses, many=True).data)


class AuthorizeView(OAuthServerErrorMixin, ScopedAPIView):
    """Start an authorization of ``server`` for the caller (PKCE S256, state, registration)."""

    @extend_schema(
        request=AuthorizeInputSerializer,
        responses={201: AuthorizationStartSerializer, **error_responses(400, 401, 403, 404, 409), 502: error_responses(502)[502]},
    )
    def post(self, request: Request, server: str) -> Response:
        AuthorizeInputSerializer(data=request.data or {}).is_valid(raise_exception=True)
        start = integration_store().begin_authorization(self.scope, server, redirect_uri=redirect_uri_for(request))
        return Response(AuthorizationStartSerializer(start).data, status=status.HTTP_201_CREATED)


class CallbackView(OAuthServerErrorMixin, ScopedAPIView):
    """Where the authorization server sends the browser back: finishes the code exchange.

    Open to anonymous requests: the state alone names the authorization (it is
    an unguessable, single-use secret bound to the user who started it).
    """

    scoped = False  # no PERMISSION_CLASSES / AUTHENTICATION_CLASSES / THROTTLE_CLASSES: the browser comes back anonymous
    permission_classes = [AllowAny]
    authentication_classes: list[Any] = []

    @extend_schema(
        parameters=[
            OpenApiParameter("state", str, required=True),
            OpenApiParameter("code", str, required=False),
            OpenApiParameter("error", str, required=False),
        ],
        responses={200: CallbackResultSerializer, **error_responses(400, 410), 502: error_responses(502)[502]},
    )
    def get(self, request: Request) -> Response:
        params = request.query_params
        if "state" not in params:
            return Response(error_body("invalid_state", "The callback has no state."), status=status.HTTP_400_BAD_REQUEST)
        record = integration_store().complete_authorization(params.get("state"), code=params.get("code"), error=params.get("error"))
        return Response(CallbackResultSerializer({"server": record.server, "status": "connected"}).data)


class IntegrationView(ScopedAPIView):
    """Disconnect: forget the caller's tokens and pending authorization for ``server``."""

    @extend_schema(responses={204: None, **error_responses(401, 403, 404)})
    def delete(self, request: Request, server: str) -> Response:
        # A name no column can hold names no integration (PostgreSQL would refuse the query).
        if not storable(server) or not integration_store().disconnect(self.scope, server):
            return Response(error_body("not_found", "No such integration."), status=status.HTTP_404_NOT_FOUND)
        return Response(status=status.HTTP_204_NO_CONTENT)
