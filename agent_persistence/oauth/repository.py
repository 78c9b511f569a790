"""The MCP OAuth repository: plain CRUD over user integrations and per-tenant client info.

Storage only, last write wins: the flow rules (expiry, clearing the pending
authorization, deleting empty records, refresh locking) belong to
:class:`~agent_persistence.oauth.store.IntegrationStore`, which wraps whichever
repository ``AGENT_PERSISTENCE["OAUTH_REPOSITORY"]`` names. A replacement
implements the public methods of :class:`OAuthRepository`.

Records are plain dataclasses. Secrets are encrypted at rest by the model
fields; this module reads the ciphertext itself (not through the field) so one
record that no key decrypts is reported as ``unreadable`` instead of breaking a
listing, and it refuses to write over such a record, which stays intact. The
pending ``state`` is stored only as a keyed digest
(:func:`agent_persistence.fields.digest`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Iterable

from django.db import IntegrityError, transaction
from django.db.models import TextField
from django.db.models.functions import Cast
from django.utils import timezone

from ..exceptions import Conflict
from ..fields import DecryptionFailed, decrypt, digest
from ..models import McpClientInfo, McpIntegration
from ..stores.base import async_twin
from .exceptions import SecretUnreadable

INTEGRATION_SECRETS = ("pending_code_verifier", "access_token", "refresh_token")
CLIENT_SECRETS = ("client_secret",)


@dataclass(frozen=True)
class PendingAuthorization:
    """An authorization in flight: what the callback needs to finish the code exchange."""

    state_digest: str
    code_verifier: str = field(repr=False)
    token_endpoint: str
    redirect_uri: str
    expires_at: datetime
    auth_url: str = ""
    resource: str | None = None

    def expired(self, now: datetime | None = None) -> bool:
        return self.expires_at <= (now or timezone.now())


@dataclass(frozen=True)
class Tokens:
    """Granted tokens; ``expires_at`` None means the server gave no lifetime."""

    access_token: str = field(repr=False)
    refresh_token: str | None = field(default=None, repr=False)
    token_type: str = "Bearer"
    scope: str | None = None
    expires_at: datetime | None = None


@dataclass(frozen=True)
class UserIntegration:
    """One record per (tenant, user, server). ``unreadable``: a secret no key decrypts."""

    tenant: str
    user: str
    server: str
    pending: PendingAuthorization | None = None
    tokens: Tokens | None = None
    unreadable: bool = False
    updated_at: datetime | None = None

    def replace(self, **changes: Any) -> UserIntegration:
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class ClientInfo:
    """OAuth client credentials of a tenant at a server (registered or configured)."""

    tenant: str
    server: str
    client_id: str
    client_secret: str | None = field(default=None, repr=False)
    registration: dict[str, Any] = field(default_factory=dict)
    unreadable: bool = False


class OAuthRepository:
    """Django ORM storage of :class:`UserIntegration` and :class:`ClientInfo` records."""

    # -- user integrations ------------------------------------------------------------------

    def list_user_integrations(self, tenant: str, user: str, servers: Iterable[str] | None = None) -> list[UserIntegration]:
        """The user's records, by server name; only those of ``servers`` when given."""
        queryset = McpIntegration.objects.filter(tenant=tenant, user=user)
        if servers is not None:
            queryset = queryset.filter(server__in=list(servers))
        return [_integration(row) for row in _raw(queryset.order_by("server"), INTEGRATION_SECRETS)]

    def get_user_integration(self, tenant: str, user: str, server: str) -> UserIntegration | None:
        rows = _raw(McpIntegration.objects.filter(tenant=tenant, user=user, server=server), INTEGRATION_SECRETS)
        return _integration(rows[0]) if rows else None

    def find_user_integration_by_pending_state(self, state: str) -> UserIntegration | None:
        """The record whose pending authorization has ``state``, across all users and servers."""
        rows = _raw(McpIntegration.objects.filter(pending_state_digest=digest(state)), INTEGRATION_SECRETS)
        return _integration(rows[0]) if rows else None

    def save_user_integration(self, record: UserIntegration) -> None:
        """Create or replace the record of (tenant, user, server), pending and tokens both.

        Conflict ``state_in_use`` when another record holds the same pending
        state digest; SecretUnreadable when ``record`` or the stored row holds
        a secret no key decrypts (it is left as it is).
        """
        if record.unreadable:
            raise SecretUnreadable(server=record.server)
        pending, tokens = record.pending, record.tokens
        values: dict[str, Any] = {
            "pending_state_digest": pending.state_digest if pending else None,
            "pending_code_verifier": pending.code_verifier if pending else None,
            "pending_token_endpoint": pending.token_endpoint if pending else None,
            "pending_redirect_uri": pending.redirect_uri if pending else None,
            "pending_resource": pending.resource if pending else None,
            "pending_auth_url": pending.auth_url if pending else None,
            "pending_expires_at": pending.expires_at if pending else None,
            "access_token": tokens.access_token if tokens else None,
            "refresh_token": tokens.refresh_token if tokens else None,
            "token_type": tokens.token_type if tokens else None,
            "scope": tokens.scope if tokens else None,
            "token_expires_at": tokens.expires_at if tokens else None,
            "updated_at": timezone.now(),
        }
        key = {"tenant": record.tenant, "user": record.user, "server": record.server}
        try:
            with transaction.atomic():
                existing = _raw(McpIntegration.objects.select_for_update().filter(**key), INTEGRATION_SECRETS)
                if existing and _integration(existing[0]).unreadable:
                    raise SecretUnreadable(server=record.server)
                if existing:
                    McpIntegration.objects.filter(**key).update(**values)
                else:
                    McpIntegration.objects.create(**key, **values)
        except IntegrityError:
            # A concurrent first save of the same key, or a state digest in use elsewhere.
            if pending and McpIntegration.objects.filter(pending_state_digest=pending.state_digest).exclude(**key).exists():
                raise Conflict("That authorization state is already in use.", code="state_in_use") from None
            with transaction.atomic():
                McpIntegration.objects.filter(**key).update(**values)

    def delete_user_integration(self, tenant: str, user: str, server: str) -> bool:
        deleted, _ = McpIntegration.objects.filter(tenant=tenant, user=user, server=server).delete()
        return deleted > 0

    def clear_expired_pendings(self, before: datetime, limit: int) -> int:
        """Clear up to ``limit`` pending authorizations that expired before ``before``.

        A record left with neither pending nor tokens is deleted. Returns how
        many pendings were cleared.
        """
        with transaction.atomic():
            ids = list(
                McpIntegration.objects.select_for_update()
                .filter(pending_expires_at__lt=before)
                .order_by("pending_expires_at")
                .values_list("pk", flat=True)[:limit]
            )
            McpIntegration.objects.filter(pk__in=ids, access_token__isnull=True).delete()
            McpIntegration.objects.filter(pk__in=ids).update(**{name: None for name in PENDING_FIELDS})
        return len(ids)

    # -- client info ------------------------------------------------------------------------

    def list_client_info(self, tenant: str, servers: Iterable[str] | None = None) -> list[ClientInfo]:
        queryset = McpClientInfo.objects.filter(tenant=tenant)
        if servers is not None:
            queryset = queryset.filter(server__in=list(servers))
        return [_client_info(row) for row in _raw(queryset.order_by("server"), CLIENT_SECRETS)]

    def get_client_info(self, tenant: str, server: str) -> ClientInfo | None:
        rows = _raw(McpClientInfo.objects.filter(tenant=tenant, server=server), CLIENT_SECRETS)
        return _client_info(rows[0]) if rows else None

    def save_client_info(self, record: ClientInfo, *, replace: bool = True) -> None:
        """Create or replace the client info of (tenant, server).

        With ``replace=False`` an existing record is kept and Conflict
        ``client_exists`` raised, so two concurrent registrations agree on one client.
        """
        if record.unreadable:
            raise SecretUnreadable(server=record.server)
        key = {"tenant": record.tenant, "server": record.server}
        values = {
            "client_id": record.client_id,
            "client_secret": record.client_secret,
            "registration": record.registration,
            "updated_at": timezone.now(),
        }
        try:
            with transaction.atomic():
                McpClientInfo.objects.create(**key, **values)
            return
        except IntegrityError:
            if not replace:
                raise Conflict("Client info for this server already exists.", code="client_exists") from None
        McpClientInfo.objects.filter(**key).update(**values)

    def delete_client_info(self, tenant: str, server: str) -> bool:
        deleted, _ = McpClientInfo.objects.filter(tenant=tenant, server=server).delete()
        return deleted > 0

    alist_user_integrations = async_twin("list_user_integrations")
    aget_user_integration = async_twin("get_user_integration")
    afind_user_integration_by_pending_state = async_twin("find_user_integration_by_pending_state")
    asave_user_integration = async_twin("save_user_integration")
    adelete_user_integration = async_twin("delete_user_integration")
    aclear_expired_pendings = async_twin("clear_expired_pendings")
    alist_client_info = async_twin("list_client_info")
    aget_client_info = async_twin("get_client_info")
    asave_client_info = async_twin("save_client_info")
    adelete_client_info = async_twin("delete_client_info")


PENDING_FIELDS = (
    "pending_state_digest",
    "pending_code_verifier",
    "pending_token_endpoint",
    "pending_redirect_uri",
    "pending_resource",
    "pending_auth_url",
    "pending_expires_at",
)


def raw_secret(name: str) -> str:
    """The alias under which :func:`_raw` returns a secret column's ciphertext."""
    return f"{name}__ciphertext"


def _raw(queryset: Any, secrets: tuple[str, ...]) -> list[dict[str, Any]]:
    """Rows as dicts, with each secret column as ciphertext (no decryption yet)."""
    model = queryset.model
    plain = [f.attname for f in model._meta.concrete_fields if f.attname not in secrets]
    ciphertexts = {raw_secret(name): Cast(name, output_field=TextField()) for name in secrets}
    return list(queryset.annotate(**ciphertexts).values(*plain, *ciphertexts))


def _open(row: dict[str, Any], secrets: tuple[str, ...]) -> tuple[dict[str, str | None], bool]:
    """The decrypted secrets of a row, and whether any failed to decrypt."""
    opened: dict[str, str | None] = {}
    unreadable = False
    for name in secrets:
        ciphertext = row[raw_secret(name)]
        try:
            opened[name] = None if ciphertext is None else decrypt(ciphertext)
        except DecryptionFailed:
            opened[name] = None
            unreadable = True
    return opened, unreadable


def _integration(row: dict[str, Any]) -> UserIntegration:
    secrets, unreadable = _open(row, INTEGRATION_SECRETS)
    pending = None
    if row["pending_state_digest"] and not unreadable:
        pending = PendingAuthorization(
            state_digest=row["pending_state_digest"],
            code_verifier=secrets["pending_code_verifier"] or "",
            token_endpoint=row["pending_token_endpoint"] or "",
            redirect_uri=row["pending_redirect_uri"] or "",
            expires_at=row["pending_expires_at"],
            auth_url=row["pending_auth_url"] or "",
            resource=row["pending_resource"],
        )
    tokens = None
    if secrets["access_token"] is not None:
        tokens = Tokens(
            access_token=secrets["access_token"],
            refresh_token=secrets["refresh_token"],
            token_type=row["token_type"] or "Bearer",
            scope=row["scope"],
            expires_at=row["token_expires_at"],
        )
    return UserIntegration(
        tenant=row["tenant"],
        user=row["user"],
        server=row["server"],
        pending=pending,
        tokens=tokens,
        unreadable=unreadable,
        updated_at=row["updated_at"],
    )


def _client_info(row: dict[str, Any]) -> ClientInfo:
    secrets, unreadable = _open(row, CLIENT_SECRETS)
    return ClientInfo(
        tenant=row["tenant"],
        server=row["server"],
        client_id=row["client_id"],
        client_secret=secrets["client_secret"],
        registration=row["registration"] or {},
        unreadable=unreadable,
    )
