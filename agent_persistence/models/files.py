"""File records; their content lives in a Django storage backend."""

from __future__ import annotations

from typing import Any

from django.core.files.storage import storages
from django.db import models
from django.db.models import Q
from django.utils import timezone

from ..conf import app_settings
from ..ids import uuid7


def file_storage() -> Any:
    """The storage chosen by ``AGENT_PERSISTENCE["FILE_STORAGE"]`` (an alias of settings.STORAGES)."""
    return storages[app_settings.FILE_STORAGE]


def upload_to(instance: "StoredFile", filename: str) -> str:
    folder = timezone.now().strftime(app_settings.FILE_UPLOAD_TO)
    # The record id, not the client's file name, names the object: no collisions, no path tricks.
    return f"{folder}{instance.id}"


class StoredFile(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    conversation = models.ForeignKey("agent_persistence.Conversation", on_delete=models.CASCADE, related_name="files")
    message = models.ForeignKey(
        "agent_persistence.Message", on_delete=models.SET_NULL, null=True, blank=True, related_name="attachments"
    )
    uploader = models.CharField(max_length=255, null=True, blank=True)
    agent = models.CharField(max_length=255, null=True, blank=True)
    name = models.CharField(max_length=255)
    content_type = models.CharField(max_length=255, default="application/octet-stream")
    size = models.PositiveBigIntegerField()
    content = models.FileField(storage=file_storage, upload_to=upload_to, max_length=500)
    expires_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name = "file"
        ordering = ["created_at", "id"]
        indexes = [
            models.Index(fields=["conversation", "created_at", "id"], name="ap_file_conv_created"),
            models.Index(fields=["expires_at"], name="ap_file_expiry", condition=Q(expires_at__isnull=False)),
        ]

    def __str__(self) -> str:
        return self.name
