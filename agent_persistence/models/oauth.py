"""MCP OAuth: per-user integrations (pending authorization and tokens) and per-tenant client info.

Every secret is an :class:`~agent_persistence.fields.EncryptedTextField`; the
pending ``state`` is kept only as a keyed digest, for the callback's lookup.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils import timezone

from ..fields import EncryptedTextField
from ..ids import uuid7


class McpIntegration(models.Model):
    """One record per (tenant, user, server): an authorization in flight and/or granted tokens."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    tenant = models.CharField(max_length=255, blank=True, default="")
    user = models.CharField(max_length=255)
    server = models.CharField(max_length=255)
    # Pending authorization (all empty when none is in flight).
    pending_state_digest = models.CharField(max_length=64, null=True, blank=True, editable=False)
    pending_code_verifier = EncryptedTextField(null=True, blank=True)
    pending_token_endpoint = models.URLField(max_length=2000, null=True, blank=True)
    pending_redirect_uri = models.URLField(max_length=2000, null=True, blank=True)
    pending_resource = models.CharField(max_length=2000, null=True, blank=True)
    pending_auth_url = models.URLField(max_length=4000, null=True, blank=True)
    pending_expires_at = models.DateTimeField(null=True, blank=True)
    # Granted tokens.
    access_token = EncryptedTextField(null=True, blank=True)
    refresh_token = EncryptedTextField(null=True, blank=True)
    token_type = models.CharField(max_length=40, null=True, blank=True)
    scope = models.TextField(null=True, blank=True)
    token_expires_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name = "MCP integration"
        ordering = ["tenant", "user", "server"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "user", "server"], name="ap_mcp_integration_unique"),
            models.UniqueConstraint(
                fields=["pending_state_digest"],
                name="ap_mcp_pending_state_unique",
                condition=Q(pending_state_digest__isnull=False),
            ),
        ]
        indexes = [
            models.Index(
                fields=["pending_expires_at"], name="ap_mcp_pending_expiry", condition=Q(pending_expires_at__isnull=False)
            ),
        ]

    def __str__(self) -> str:
        return f"{self.server} for {self.user}"


class McpClientInfo(models.Model):
    """OAuth client credentials of one tenant at one server (dynamic client registration)."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    tenant = models.CharField(max_length=255, blank=True, default="")
    server = models.CharField(max_length=255)
    client_id = models.CharField(max_length=500)
    client_secret = EncryptedTextField(null=True, blank=True)
    registration = models.JSONField(default=dict, blank=True, help_text="Non-secret client metadata.")
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name = "MCP client info"
        verbose_name_plural = "MCP client info"
        ordering = ["tenant", "server"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "server"], name="ap_mcp_client_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.server} ({self.tenant or 'default tenant'})"
