"""The integration store: the MCP OAuth flow rules over a repository.

:class:`IntegrationStore` wraps the repository named by
``AGENT_PERSISTENCE["OAUTH_REPOSITORY"]`` (get one with :func:`integration_store`)
and owns the rules, so a repository stays plain storage:

- an expired pending authorization reads as absent and is cleaned up on read;
- landing tokens clears the pending authorization they came from;
- a refresh response without a ``refresh_token`` keeps the stored one;
- one refresh at a time per (tenant, user, server), across processes, under a
  lease (``LEASE_STORE``) keyed ``mcp-refresh:<user>:<server>``;
- a record left with neither pending authorization nor tokens is deleted.

Methods are sync (each has an ``a``-prefixed async twin). None logs or returns a
secret; the pending ``state`` is handed to the caller once, inside the
authorization URL, and stored only as a digest.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from django.utils import timezone

from ..conf import app_settings
from ..exceptions import Conflict, Validation
from ..fields import digest
from ..scope import Scope
from ..stores import get_store, lease_store
from ..stores.base import async_twin, check_scope
from .client import ClientCredentials, TokenClient, TokenResponse, code_challenge, new_code_verifier, new_state
from .client import register_client, safe_error_code
from .exceptions import (
    AuthorizationDenied,
    AuthorizationExpired,
    AuthorizationRequired,
    InvalidState,
    OAuthServerError,
    SecretUnreadable,
)
from .repository import ClientInfo, OAuthRepository, PendingAuthorization, Tokens, UserIntegration
from .servers import ServerConfig, configured_servers, server_config

logger = logging.getLogger(__name__)

LEASE_KEY_MAX_LENGTH = 255
REFRESH_POLL_INTERVAL = 0.05


@dataclass(frozen=True)
class IntegrationStatus:
    """What a user may see of an integration: never a secret.

    ``status``: ``connected`` (a token, not expired or refreshable), ``expired``
    (a token past its expiry and no refresh token), ``pending`` (an
    authorization in flight), ``disconnected`` (nothing), ``unreadable`` (a
    stored secret no key decrypts).
    """

    server: str
    status: str
    scope: str | None = None
    expires_at: datetime | None = None
    pending_expires_at: datetime | None = None
    updated_at: datetime | None = None


@dataclass(frozen=True)
class AuthorizationStart:
    server: str
    authorization_url: str = ""
    expires_at: datetime | None = None

    def __repr__(self) -> str:  # the URL carries the state
        return f"AuthorizationStart(server={self.server!r}, expires_at={self.expires_at!r})"


class IntegrationStore:
    """Flow rules over an :class:`~agent_persistence.oauth.repository.OAuthRepository`."""

    def __init__(self, repository: OAuthRepository | None = None, token_client: TokenClient | None = None) -> None:
        self.repository = repository if repository is not None else get_store("OAUTH_REPOSITORY")
        self.token_client = token_client or TokenClient()

    # -- reading ------------------------------------------------------------------------------

    def get(self, scope: Scope, server: str) -> UserIntegration | None:
        """The record of (scope, server); an expired pending reads as absent and is cleaned up."""
        check_scope(scope)
        record = self.repository.get_user_integration(scope.tenant, scope.user, server)
        return self._drop_expired_pending(record)

    def list_statuses(self, scope: Scope) -> list[IntegrationStatus]:
        """One status per configured server, plus any stored record of a server no longer configured."""
        check_scope(scope)
        records = {r.server: self._drop_expired_pending(r) for r in self.repository.list_user_integrations(scope.tenant, scope.user)}
        names = sorted(set(configured_servers()) | set(records))
        return [status_of(name, records.get(name)) for name in names]

    # -- the authorization dance ------------------------------------------------------------------

    def begin_authorization(self, scope: Scope, server: str, *, redirect_uri: str) -> AuthorizationStart:
        """Start an authorization: PKCE S256, a fresh state, client registration when needed.

        Returns the authorization URL to send the user's browser to. Tokens
        already granted stay until new ones land; a pending authorization
        already in flight is replaced.
        """
        check_scope(scope)
        config = server_config(server)
        client = self.client_credentials(scope.tenant, config, redirect_uri=redirect_uri)
        existing = self.repository.get_user_integration(scope.tenant, scope.user, server)
        if existing is not None and existing.unreadable:
            logger.warning("MCP OAuth: the record of %s for user %s holds a secret no key decrypts.", server, scope.user)
            raise SecretUnreadable(server=server)
        state, verifier = new_state(), new_code_verifier()
        query = {
            "response_type": "code",
            "client_id": client.client_id,
            "redirect_uri": redirect_uri,
            "state": state,
            "code_challenge": code_challenge(verifier),
            "code_challenge_method": "S256",
        }
        if config.scopes:
            query["scope"] = " ".join(config.scopes)
        if config.resource:
            query["resource"] = config.resource
        authorization_url = _with_query(config.authorization_endpoint, query)
        expires_at = timezone.now() + timedelta(seconds=float(app_settings.OAUTH_PENDING_TTL))
        pending = PendingAuthorization(
            state_digest=digest(state),
            code_verifier=verifier,
            token_endpoint=config.token_endpoint,
            redirect_uri=redirect_uri,
            expires_at=expires_at,
            auth_url=_without_state(authorization_url),
            resource=config.resource,
        )
        base = existing or UserIntegration(tenant=scope.tenant, user=scope.user, server=server)
        self.repository.save_user_integration(base.replace(pending=pending))
        logger.info("MCP OAuth: authorization of %s started for user %s.", server, scope.user)
        return AuthorizationStart(server=server, authorization_url=authorization_url, expires_at=expires_at)

    def complete_authorization(
        self, state: Any, *, code: Any = None, error: Any = None
    ) -> UserIntegration:
        """Finish the authorization the callback's ``state`` names: exchange ``code`` with PKCE.

        Unknown or already used state: InvalidState (400). Expired:
        AuthorizationExpired (410), and the pending is cleaned up. An ``error``
        from the server: AuthorizationDenied (400); a code the token endpoint
        refuses (``invalid_grant``): AuthorizationDenied with code ``invalid_grant``
        (400). A failing token endpoint: OAuthServerError. In each case the stored tokens stay as they were.
        """
        if not isinstance(state, str) or not state or len(state) > 1000:
            raise InvalidState()
        record = self.repository.find_user_integration_by_pending_state(state)
        if record is None or record.pending is None:
            logger.info("MCP OAuth: a callback with an unknown or used state.")
            raise InvalidState()
        where = f"{record.server} for user {record.user}"
        if record.pending.expired():
            self._drop_expired_pending(record)
            logger.info("MCP OAuth: a callback for %s after its authorization expired.", where)
            raise AuthorizationExpired(server=record.server)
        if error is not None:
            error_code = safe_error_code(error) or "invalid_error"
            logger.info("MCP OAuth: the authorization of %s was refused (error=%s).", where, error_code)
            raise AuthorizationDenied(server=record.server, error=error_code)
        if not isinstance(code, str) or not code or len(code) > 4000:
            raise Validation("The callback has no authorization code.", code="missing_code", server=record.server)
        config = server_config(record.server)
        client = self.client_credentials(record.tenant, config, redirect_uri=record.pending.redirect_uri, register=False)
        try:
            granted = self.token_client.exchange_code(
                record.pending.token_endpoint,
                code=code,
                code_verifier=record.pending.code_verifier,
                redirect_uri=record.pending.redirect_uri,
                client=client,
                resource=record.pending.resource,
            )
        except OAuthServerError as exc:
            if exc.details.get("error") == "invalid_grant":
                # The code is unknown, used or expired at the server (e.g. a concurrent second callback).
                raise AuthorizationDenied(
                    "The authorization server refused the code; start the authorization again.",
                    code="invalid_grant",
                    server=record.server,
                    error="invalid_grant",
                ) from None
            raise
        # Re-read: keep a newer pending started meanwhile; clear ours.
        current = self.repository.get_user_integration(record.tenant, record.user, record.server) or record
        pending = current.pending if current.pending and current.pending.state_digest != record.pending.state_digest else None
        landed = current.replace(pending=pending, tokens=_tokens(granted, previous=current.tokens))
        self.repository.save_user_integration(landed)
        logger.info("MCP OAuth: tokens for %s landed.", where)
        return landed

    def disconnect(self, scope: Scope, server: str) -> bool:
        """Forget the user's tokens and pending authorization for ``server``."""
        check_scope(scope)
        deleted = self.repository.delete_user_integration(scope.tenant, scope.user, server)
        if deleted:
            logger.info("MCP OAuth: %s disconnected for user %s.", server, scope.user)
        return deleted

    # -- tokens -------------------------------------------------------------------------------

    def access_token(self, scope: Scope, server: str, *, authorize_url: str | None = None) -> Tokens:
        """Valid tokens for (scope, server), refreshed when within ``OAUTH_REFRESH_MARGIN`` of expiry.

        AuthorizationRequired (carrying ``authorize_url``) when there are none
        or they cannot be refreshed; SecretUnreadable when they do not decrypt;
        OAuthServerError when the token endpoint fails (nothing is changed).
        """
        check_scope(scope)
        record = self.get(scope, server)
        if record is not None and record.unreadable:
            logger.warning("MCP OAuth: the record of %s for user %s holds a secret no key decrypts.", server, scope.user)
            raise SecretUnreadable(server=server)
        if record is None or record.tokens is None:
            raise AuthorizationRequired(server=server, authorize_url=authorize_url)
        if not _needs_refresh(record.tokens):
            return record.tokens
        return self.refresh(scope, server, authorize_url=authorize_url, only_if_due=True)

    def refresh(self, scope: Scope, server: str, *, authorize_url: str | None = None, only_if_due: bool = False) -> Tokens:
        """Refresh the tokens of (scope, server): one refresh at a time across processes.

        Waits for a refresh already running elsewhere and, with
        ``only_if_due``, uses its result instead of refreshing again.
        """
        check_scope(scope)
        key = refresh_lease_key(scope.user, server)
        holder = f"refresh:{uuid.uuid4()}"
        ttl = float(app_settings.OAUTH_HTTP_TIMEOUT) + 5.0
        leases = lease_store()
        deadline = time.monotonic() + ttl * 2
        while not _acquired(leases, scope.tenant, key, holder, ttl):
            if time.monotonic() > deadline:
                raise Conflict("A refresh of these tokens is taking too long; retry.", code="refresh_busy", server=server)
            time.sleep(REFRESH_POLL_INTERVAL)
        try:
            record = self.get(scope, server)
            if record is not None and record.unreadable:
                raise SecretUnreadable(server=server)
            if record is None or record.tokens is None:
                raise AuthorizationRequired(server=server, authorize_url=authorize_url)
            if only_if_due and not _needs_refresh(record.tokens):
                return record.tokens  # refreshed by whoever held the lease before us
            if not record.tokens.refresh_token:
                raise AuthorizationRequired(
                    "The token expired and there is no refresh token.", server=server, authorize_url=authorize_url
                )
            config = server_config(server)
            client = self.client_credentials(scope.tenant, config, redirect_uri=None, register=False)
            try:
                granted = self.token_client.refresh(
                    config.token_endpoint, refresh_token=record.tokens.refresh_token, client=client, resource=config.resource
                )
            except OAuthServerError as exc:
                if exc.details.get("error") == "invalid_grant":
                    # The grant is revoked or expired: only a new authorization helps.
                    self._save_or_delete(record.replace(tokens=None))
                    logger.info("MCP OAuth: the refresh token of %s for user %s was refused.", server, scope.user)
                    raise AuthorizationRequired(
                        "The authorization was revoked or expired.", server=server, authorize_url=authorize_url
                    ) from None
                raise
            tokens = _tokens(granted, previous=record.tokens)
            # Re-read so a pending authorization started during the call is kept.
            current = self.repository.get_user_integration(scope.tenant, scope.user, server) or record
            self.repository.save_user_integration(current.replace(tokens=tokens))
            logger.info("MCP OAuth: tokens of %s for user %s refreshed.", server, scope.user)
            return tokens
        finally:
            leases.release(scope.tenant, key, holder)

    # -- clients ------------------------------------------------------------------------------

    def client_credentials(
        self, tenant: str, config: ServerConfig, *, redirect_uri: str | None, register: bool = True
    ) -> ClientCredentials:
        """The configured client, else the tenant's registered one, else a new registration."""
        if config.client_id:
            return ClientCredentials(config.client_id, config.client_secret, config.token_endpoint_auth_method)
        info = self.repository.get_client_info(tenant, config.name)
        if info is None and register and config.registration_endpoint and redirect_uri:
            info = self._register(tenant, config, redirect_uri)
        if info is None:
            raise Validation(
                f"No OAuth client is configured for {config.name} and it offers no registration.",
                code="no_oauth_client",
                server=config.name,
            )
        if info.unreadable:
            logger.warning("MCP OAuth: the client secret of %s (tenant %r) does not decrypt.", config.name, tenant)
            raise SecretUnreadable(server=config.name)
        method = info.registration.get("token_endpoint_auth_method") or ("client_secret_basic" if info.client_secret else "none")
        return ClientCredentials(info.client_id, info.client_secret, method)

    def _register(self, tenant: str, config: ServerConfig, redirect_uri: str) -> ClientInfo:
        assert config.registration_endpoint
        answer = register_client(
            config.registration_endpoint,
            redirect_uri=redirect_uri,
            client_name=config.client_name,
            scope=" ".join(config.scopes) or None,
            auth_method=config.token_endpoint_auth_method,
        )
        public = {k: v for k, v in answer.items() if k not in ("client_secret", "registration_access_token", "client_id")}
        info = ClientInfo(
            tenant=tenant,
            server=config.name,
            client_id=answer["client_id"],
            client_secret=answer.get("client_secret") if isinstance(answer.get("client_secret"), str) else None,
            registration=public,
        )
        try:
            self.repository.save_client_info(info, replace=False)
        except Conflict:
            # Another process registered first: use its client, so every pending agrees.
            existing = self.repository.get_client_info(tenant, config.name)
            assert existing is not None
            return existing
        logger.info("MCP OAuth: registered a client at %s for tenant %r.", config.name, tenant)
        return info

    # -- housekeeping -------------------------------------------------------------------------

    def purge_expired_pendings(self, *, now: datetime | None = None, limit: int | None = None) -> int:
        """Clear pending authorizations past their expiry (batched); empty records are deleted."""
        return self.repository.clear_expired_pendings(now or timezone.now(), limit or app_settings.SWEEP_BATCH_SIZE)

    def _drop_expired_pending(self, record: UserIntegration | None) -> UserIntegration | None:
        if record is None or record.pending is None or not record.pending.expired():
            return record
        cleaned = record.replace(pending=None)
        self._save_or_delete(cleaned, expected_digest=record.pending.state_digest)
        return cleaned if cleaned.tokens is not None else None

    def _save_or_delete(self, record: UserIntegration, *, expected_digest: str | None = None) -> None:
        """Save ``record``, or delete it when it holds nothing.

        With ``expected_digest``, only while the stored pending is still that one
        (a cleanup must not undo a newer authorization started meanwhile).
        """
        if expected_digest is not None:
            current = self.repository.get_user_integration(record.tenant, record.user, record.server)
            if current is None or current.pending is None or current.pending.state_digest != expected_digest:
                return
            record = current.replace(pending=None)
        if record.pending is None and record.tokens is None:
            self.repository.delete_user_integration(record.tenant, record.user, record.server)
        else:
            self.repository.save_user_integration(record)

    aget = async_twin("get")
    alist_statuses = async_twin("list_statuses")
    abegin_authorization = async_twin("begin_authorization")
    acomplete_authorization = async_twin("complete_authorization")
    adisconnect = async_twin("disconnect")
    aaccess_token = async_twin("access_token")
    arefresh = async_twin("refresh")
    apurge_expired_pendings = async_twin("purge_expired_pendings")


def integration_store() -> IntegrationStore:
    """The integration store over the configured repository."""
    return IntegrationStore(get_store("OAUTH_REPOSITORY"))


def _acquired(leases: Any, tenant: str, key: str, holder: str, ttl: float) -> bool:
    """Whether ``holder`` took the refresh lease; a lease churned by other refreshers counts as busy.

    Waiting refreshers take and drop the lease in quick turns (each finds the
    tokens fresh and releases), so one acquire may lose every round it tries.
    That is the lease being busy, not an error: the caller polls again.
    """
    try:
        return leases.acquire(tenant, key, holder, ttl=ttl).acquired
    except Conflict as exc:
        if exc.code != "lease_contended":
            raise
        return False


def refresh_lease_key(user: str, server: str) -> str:
    key = f"mcp-refresh:{user}:{server}"
    if len(key) <= LEASE_KEY_MAX_LENGTH:
        return key
    return f"mcp-refresh:{digest(user + chr(0) + server)}"


def status_of(server: str, record: UserIntegration | None) -> IntegrationStatus:
    if record is None:
        return IntegrationStatus(server=server, status="disconnected")
    if record.unreadable:
        return IntegrationStatus(server=server, status="unreadable", updated_at=record.updated_at)
    tokens, pending = record.tokens, record.pending
    if tokens is not None:
        expired = tokens.expires_at is not None and tokens.expires_at <= timezone.now() and not tokens.refresh_token
        status = "expired" if expired else "connected"
    else:
        status = "pending" if pending else "disconnected"
    return IntegrationStatus(
        server=server,
        status=status,
        scope=tokens.scope if tokens else None,
        expires_at=tokens.expires_at if tokens else None,
        pending_expires_at=pending.expires_at if pending else None,
        updated_at=record.updated_at,
    )


def _needs_refresh(tokens: Tokens) -> bool:
    if tokens.expires_at is None:
        return False
    margin = timedelta(seconds=float(app_settings.OAUTH_REFRESH_MARGIN))
    return tokens.expires_at - margin <= timezone.now()


def _tokens(granted: TokenResponse, *, previous: Tokens | None) -> Tokens:
    # RFC 6749 6: a refresh response may omit refresh_token; the old one stays valid then.
    refresh_token = granted.refresh_token or (previous.refresh_token if previous else None)
    return Tokens(
        access_token=granted.access_token,
        refresh_token=refresh_token,
        token_type=granted.token_type,
        scope=granted.scope if granted.scope is not None else (previous.scope if previous else None),
        expires_at=granted.expires_at,
    )


def _with_query(url: str, params: dict[str, str]) -> str:
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True) + list(params.items())
    return urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(query), ""))


def _without_state(url: str) -> str:
    """The authorization URL as stored: without its state, which is kept only as a digest."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "state"]
    return urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(query), ""))
