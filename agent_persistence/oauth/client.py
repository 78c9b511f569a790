"""The OAuth 2.1 client side over httpx: PKCE, metadata discovery, registration, token calls.

- :func:`new_state`, :func:`new_code_verifier`, :func:`code_challenge` (S256).
- :func:`discover`: RFC 8414 authorization server metadata.
- :func:`register_client`: RFC 7591 dynamic client registration.
- :class:`TokenClient`: the token endpoint (``authorization_code`` with PKCE and
  ``refresh_token`` grants), with ``client_secret_basic``, ``client_secret_post``
  or public-client (``none``) authentication.

Every failure is :class:`~agent_persistence.oauth.exceptions.OAuthServerError`
carrying the HTTP status and the OAuth ``error`` code, never a response body,
token or secret; log lines say the same.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
from django.utils import timezone

from ..conf import app_settings
from .exceptions import OAuthServerError

logger = logging.getLogger(__name__)

#: An OAuth ``error`` code is ASCII letters and underscores (RFC 6749 5.2); anything else is dropped.
SAFE_ERROR_CODE = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")


def new_state() -> str:
    return secrets.token_urlsafe(32)


def new_code_verifier() -> str:
    """A PKCE code verifier: 86 characters of the unreserved set (RFC 7636 4.1 allows 43-128)."""
    return secrets.token_urlsafe(64)


def code_challenge(verifier: str) -> str:
    """The S256 challenge: base64url(sha256(verifier)) without padding."""
    return base64.urlsafe_b64encode(hashlib.sha256(verifier.encode("ascii")).digest()).rstrip(b"=").decode("ascii")


def safe_error_code(value: Any) -> str | None:
    """An OAuth error code fit for a log line or a response, or None."""
    return value if isinstance(value, str) and SAFE_ERROR_CODE.match(value) else None


def metadata_url(issuer: str) -> str:
    """RFC 8414 section 3: the well-known suffix goes between the host and the issuer's path."""
    parts = urlsplit(issuer)
    path = parts.path.rstrip("/")
    return urlunsplit((parts.scheme, parts.netloc, f"/.well-known/oauth-authorization-server{path}", "", ""))


def _http() -> httpx.Client:
    return httpx.Client(timeout=app_settings.OAUTH_HTTP_TIMEOUT, follow_redirects=False)


def _json_object(response: httpx.Response, what: str, url: str) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        logger.warning("OAuth %s at %s answered %s with a body that is not a JSON object.", what, url, response.status_code)
        raise OAuthServerError(f"The {what} answered with something that is not JSON.", status=response.status_code)
    return body


def _failed(response: httpx.Response, what: str, url: str) -> OAuthServerError:
    error = None
    try:
        body = response.json()
        if isinstance(body, dict):
            error = safe_error_code(body.get("error"))
    except ValueError:
        pass
    logger.warning("OAuth %s at %s answered %s (error=%s).", what, url, response.status_code, error or "-")
    details: dict[str, Any] = {"status": response.status_code}
    if error:
        details["error"] = error
    return OAuthServerError(f"The {what} answered {response.status_code}.", **details)


def _send(method: str, url: str, what: str, **kwargs: Any) -> httpx.Response:
    try:
        with _http() as http:
            return http.request(method, url, **kwargs)
    except httpx.HTTPError as exc:
        logger.warning("OAuth %s at %s could not be reached: %s.", what, url, type(exc).__name__)
        raise OAuthServerError(f"The {what} could not be reached.") from None


def discover(issuer: str) -> dict[str, Any]:
    """The authorization server's metadata (RFC 8414); it must name its endpoints."""
    url = metadata_url(issuer)
    response = _send("GET", url, "metadata endpoint")
    if response.status_code != 200:
        raise _failed(response, "metadata endpoint", url)
    metadata = _json_object(response, "metadata endpoint", url)
    for key in ("authorization_endpoint", "token_endpoint"):
        if not isinstance(metadata.get(key), str):
            logger.warning("OAuth metadata at %s has no %s.", url, key)
            raise OAuthServerError(f"The authorization server's metadata has no {key}.")
    return metadata


def register_client(
    registration_endpoint: str, *, redirect_uri: str, client_name: str, scope: str | None, auth_method: str
) -> dict[str, Any]:
    """Register a client (RFC 7591); returns the server's answer (``client_id``, maybe ``client_secret``)."""
    request: dict[str, Any] = {
        "client_name": client_name,
        "redirect_uris": [redirect_uri],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": auth_method,
    }
    if scope:
        request["scope"] = scope
    response = _send("POST", registration_endpoint, "registration endpoint", json=request)
    if response.status_code not in (200, 201):
        raise _failed(response, "registration endpoint", registration_endpoint)
    answer = _json_object(response, "registration endpoint", registration_endpoint)
    if not isinstance(answer.get("client_id"), str) or not answer["client_id"]:
        raise OAuthServerError("The registration endpoint returned no client_id.")
    return answer


@dataclass(frozen=True)
class ClientCredentials:
    """Who we are at the token endpoint, and how we prove it."""

    client_id: str
    client_secret: str | None = None
    auth_method: str = "client_secret_basic"  # or client_secret_post, none


@dataclass(frozen=True)
class TokenResponse:
    access_token: str
    token_type: str
    refresh_token: str | None
    scope: str | None
    expires_at: datetime | None


class TokenClient:
    """Calls a token endpoint; one instance serves every server."""

    def exchange_code(
        self,
        token_endpoint: str,
        *,
        code: str,
        code_verifier: str,
        redirect_uri: str,
        client: ClientCredentials,
        resource: str | None = None,
    ) -> TokenResponse:
        form = {"grant_type": "authorization_code", "code": code, "code_verifier": code_verifier, "redirect_uri": redirect_uri}
        if resource:
            form["resource"] = resource
        return self._token_call(token_endpoint, form, client)

    def refresh(
        self, token_endpoint: str, *, refresh_token: str, client: ClientCredentials, resource: str | None = None
    ) -> TokenResponse:
        form = {"grant_type": "refresh_token", "refresh_token": refresh_token}
        if resource:
            form["resource"] = resource
        return self._token_call(token_endpoint, form, client)

    def _token_call(self, url: str, form: dict[str, str], client: ClientCredentials) -> TokenResponse:
        form = dict(form)
        auth = None
        if client.client_secret and client.auth_method == "client_secret_basic":
            auth = httpx.BasicAuth(client.client_id, client.client_secret)
        else:
            form["client_id"] = client.client_id
            if client.client_secret and client.auth_method == "client_secret_post":
                form["client_secret"] = client.client_secret
        sent_at = timezone.now()
        response = _send("POST", url, "token endpoint", data=form, auth=auth, headers={"Accept": "application/json"})
        if response.status_code != 200:
            raise _failed(response, "token endpoint", url)
        body = _json_object(response, "token endpoint", url)
        return parse_token_response(body, sent_at, url)


def parse_token_response(body: dict[str, Any], sent_at: datetime, url: str) -> TokenResponse:
    access_token = body.get("access_token")
    token_type = body.get("token_type")
    if not isinstance(access_token, str) or not access_token or not isinstance(token_type, str):
        logger.warning("OAuth token endpoint at %s answered without access_token or token_type.", url)
        raise OAuthServerError("The token endpoint answered without an access token.")
    expires_in = body.get("expires_in")
    expires_at = None
    if expires_in is not None:
        if isinstance(expires_in, bool) or not isinstance(expires_in, (int, float)) or expires_in < 0:
            logger.warning("OAuth token endpoint at %s answered a bad expires_in.", url)
            raise OAuthServerError("The token endpoint answered a bad expires_in.")
        expires_at = sent_at + timedelta(seconds=float(expires_in))
    refresh_token = body.get("refresh_token")
    scope = body.get("scope")
    return TokenResponse(
        access_token=access_token,
        token_type=token_type,
        refresh_token=refresh_token if isinstance(refresh_token, str) and refresh_token else None,
        scope=scope if isinstance(scope, str) else None,
        expires_at=expires_at,
    )
