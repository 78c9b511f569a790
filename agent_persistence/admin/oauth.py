"""Admins of MCP OAuth rows, which hold secrets.

A secret (token, PKCE verifier, client secret) is never loaded into a list,
a form or a log: the admins' querysets defer the encrypted columns and read
only their stored ciphertext, so each page can say whether a secret is *set*,
*not set* or *unreadable* (encrypted under a key no longer in
``ENCRYPTION_KEYS``) without decrypting anything into a page, and a lost key
never breaks a page. Integrations are browse-and-delete only (deleting one
disconnects the user, who authorizes again); client info may have its
non-secret fields changed.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import TextField
from django.db.models.functions import Cast
from django.http import HttpRequest
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from .. import models
from ..fields import DecryptionFailed, decrypt
from .base import URL_FIELDS

#: What the admin says of a stored secret, instead of its value.
SET, NOT_SET, UNREADABLE = "set", "not set", "unreadable (encrypted under a key no longer configured)"


def ciphertext_attribute(field_name: str) -> str:
    return f"{field_name}_ciphertext"


def secret_state(ciphertext: str | None) -> str:
    """set / not set / unreadable, from the stored token alone (the plaintext is dropped at once)."""
    if ciphertext is None:
        return NOT_SET
    try:
        decrypt(ciphertext)
    except DecryptionFailed:
        return UNREADABLE
    return SET


def secret_column(field_name: str) -> Any:
    """A list and detail column saying whether ``field_name`` is set."""

    @admin.display(description=_("%s") % field_name.replace("_", " "))
    def column(self: Any, obj: Any) -> str:
        return secret_state(getattr(obj, ciphertext_attribute(field_name), None))

    column.__name__ = f"{field_name}_state"
    return column


class SecretsAdmin(admin.ModelAdmin):
    """Never loads ``secret_fields``: deferred, and read as ciphertext for their state column."""

    secret_fields: tuple[str, ...] = ()

    def get_queryset(self, request: HttpRequest) -> Any:
        # Cast to text so the column comes back as the stored token: the field's from_db_value
        # (which decrypts, and raises under a lost key) never runs.
        ciphertexts = {ciphertext_attribute(name): Cast(name, output_field=TextField()) for name in self.secret_fields}
        return super().get_queryset(request).defer(*self.secret_fields).annotate(**ciphertexts)

    def get_exclude(self, request: HttpRequest, obj: Any = None) -> Any:
        return tuple(super().get_exclude(request, obj) or ()) + self.secret_fields


@admin.register(models.McpIntegration)
class McpIntegrationAdmin(SecretsAdmin):
    formfield_overrides = URL_FIELDS
    secret_fields = ("pending_code_verifier", "access_token", "refresh_token")
    list_display = ("server", "tenant", "user", "access_token_state", "refresh_token_state", "token_expires_at", "pending_expires_at")
    search_fields = ("server", "user")
    list_filter = ("server", "tenant")
    fields = (
        "id", "tenant", "user", "server", "access_token_state", "refresh_token_state", "token_type", "scope", "token_expires_at",
        "pending_code_verifier_state", "pending_state_digest", "pending_token_endpoint", "pending_redirect_uri", "pending_resource",
        "pending_auth_url", "pending_expires_at", "created_at", "updated_at",
    )  # fmt: skip
    readonly_fields = fields
    access_token_state = secret_column("access_token")
    refresh_token_state = secret_column("refresh_token")
    pending_code_verifier_state = secret_column("pending_code_verifier")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # made by the authorization flow only

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # an edited token endpoint or redirect URI would send the user's code elsewhere


@admin.register(models.McpClientInfo)
class McpClientInfoAdmin(SecretsAdmin):
    secret_fields = ("client_secret",)
    list_display = ("server", "tenant", "client_id", "client_secret_state", "updated_at")
    search_fields = ("server", "client_id")
    readonly_fields = ("id", "client_secret_state", "created_at", "updated_at")
    client_secret_state = secret_column("client_secret")

    def save_model(self, request: HttpRequest, obj: models.McpClientInfo, form: Any, change: bool) -> None:
        obj.updated_at = timezone.now()
        super().save_model(request, obj, form, change)
