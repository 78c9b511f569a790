"""Metadata entries: namespaced key/value state of a tenant, for middleware (validated compaction checkpoints)."""

from __future__ import annotations

from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from ..fields import JSONTextField


class MetadataEntry(models.Model):
    """One value under (tenant, namespace, key); the same key in two namespaces is two entries."""

    tenant = models.CharField(max_length=255, blank=True, default="")
    namespace = models.CharField(max_length=255)
    key = models.CharField(max_length=255)
    value = JSONTextField(help_text=_("The value's JSON, as text (any JSON value, null included)."))
    size = models.PositiveBigIntegerField(default=0, help_text=_("UTF-8 bytes of the value's JSON."))
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name = _("metadata entry")
        verbose_name_plural = _("metadata entries")
        ordering = ["tenant", "namespace", "key"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "namespace", "key"], name="ap_metadata_key_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.namespace}:{self.key}"
