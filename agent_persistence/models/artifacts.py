"""Blobs (bytes under a caller's key), the artifacts that point at them, and generation runs.

A :class:`Blob` row names one object of the storage chosen by
``AGENT_PERSISTENCE["BLOB_STORAGE"]``; the object's name is the app's own
(a fresh UUID per write), never the caller's key, so a key can never reach a
path of the storage. Keys are compared byte for byte on every backend
(:class:`KeyField`), which is what makes a prefix listing literal and
case-sensitive and its order the same on SQLite and PostgreSQL.

An :class:`Artifact` owns exactly one blob and belongs either to a chat run
(and so to its conversation) or to a :class:`GenerationRun` (and so to its
owner, and to its conversation when it has one).
"""

from __future__ import annotations

from typing import Any

from django.core.files.storage import storages
from django.db import models
from django.db.models import Q
from django.utils import timezone

from ..conf import app_settings
from ..ids import uuid7
from ..statuses import FINISHED_GENERATION_STATUSES, GenerationKind, GenerationStatus

#: The longest key a blob may have, in characters.
MAX_KEY_LENGTH = 1024


def blob_storage() -> Any:
    """The storage chosen by ``AGENT_PERSISTENCE["BLOB_STORAGE"]`` (an alias of settings.STORAGES)."""
    return storages[app_settings.BLOB_STORAGE]


class KeyField(models.CharField):
    """Text compared byte for byte: the "C" collation on PostgreSQL, SQLite's default BINARY elsewhere.

    PostgreSQL's database collation (``en_US.UTF-8``, say) would sort ``"a"``
    before ``"B"`` and make range scans disagree with Python's order; under
    "C" the order is that of the UTF-8 bytes, which is the order of the code
    points, as in SQLite and in Python.
    """

    def db_parameters(self, connection: Any) -> dict[str, Any]:
        parameters = super().db_parameters(connection)
        if connection.vendor == "postgresql":
            parameters["collation"] = "C"
        return parameters


class Blob(models.Model):
    """The bytes stored under ``key`` in ``tenant``; ``put`` on the same key replaces them."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    tenant = models.CharField(max_length=255, blank=True, default="")
    key = KeyField(max_length=MAX_KEY_LENGTH)
    content = models.FileField(storage=blob_storage, max_length=500)
    content_type = models.CharField(max_length=255, default="application/octet-stream")
    size = models.PositiveBigIntegerField()
    #: Text pairs the caller keeps with the bytes (TanStack's ``customMetadata``); a put replaces them.
    custom_metadata = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name = "blob"
        ordering = ["tenant", "key"]
        constraints = [models.UniqueConstraint(fields=["tenant", "key"], name="ap_blob_tenant_key_unique")]

    def __str__(self) -> str:
        return self.key


class GenerationRun(models.Model):
    """One non-chat generation (an image, a speech clip, a transcript...), filed under a slot.

    The id is the caller's run id; ``slot`` names what the runs fill (TanStack's
    generation ``threadId``: "product-42-hero"). Only result metadata lives
    here; the bytes are artifacts of the run, in the blob store.
    """

    id = models.UUIDField(primary_key=True, editable=False)
    tenant = models.CharField(max_length=255, blank=True, default="")
    owner = models.CharField(max_length=255)
    conversation = models.ForeignKey(
        "agent_persistence.Conversation",
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="generation_runs",
    )
    slot = models.CharField(max_length=255)
    kind = models.CharField(max_length=16, choices=GenerationKind.choices)
    provider = models.CharField(max_length=255, blank=True, default="")
    model = models.CharField(max_length=255, blank=True, default="")
    status = models.CharField(max_length=16, choices=GenerationStatus.choices, default=GenerationStatus.RUNNING)
    started_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)
    error = models.JSONField(null=True, blank=True)
    result = models.JSONField(null=True, blank=True)
    usage = models.JSONField(default=dict, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    #: Refs to what the run made (TanStack's generation run ``artifacts``): a list of JSON objects, replaced whole.
    #: (``artifacts`` is the reverse relation to the run's Artifact rows; the store's argument is ``artifacts``.)
    artifact_refs = models.JSONField(default=list, blank=True)

    class Meta:
        verbose_name = "generation run"
        ordering = ["-started_at", "-id"]
        indexes = [models.Index(fields=["tenant", "owner", "slot", "-started_at", "-id"], name="ap_genrun_slot_latest")]
        constraints = [
            models.CheckConstraint(condition=Q(kind__in=GenerationKind.values), name="ap_genrun_kind_valid"),
            models.CheckConstraint(condition=Q(status__in=GenerationStatus.values), name="ap_genrun_status_valid"),
            models.CheckConstraint(
                condition=Q(status__in=FINISHED_GENERATION_STATUSES, finished_at__isnull=False)
                | (~Q(status__in=FINISHED_GENERATION_STATUSES) & Q(finished_at__isnull=True)),
                name="ap_genrun_finished_at_iff_finished",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.id} ({self.status})"


class Artifact(models.Model):
    """A record of bytes a run produced: its media type and size, and the blob that holds them."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    tenant = models.CharField(max_length=255, blank=True, default="")
    owner = models.CharField(max_length=255)
    conversation = models.ForeignKey(
        "agent_persistence.Conversation", on_delete=models.CASCADE, null=True, blank=True, related_name="artifacts"
    )
    run = models.ForeignKey(
        "agent_persistence.Run", on_delete=models.CASCADE, null=True, blank=True, related_name="artifacts"
    )
    generation_run = models.ForeignKey(
        GenerationRun, on_delete=models.CASCADE, null=True, blank=True, related_name="artifacts"
    )
    #: The blob the artifact owns (``save``); None for a record-only artifact (``save_record``).
    blob = models.OneToOneField(Blob, on_delete=models.CASCADE, null=True, blank=True, related_name="artifact")
    #: A record-only artifact's bytes: a key of the owner's tenant in the blob store (the caller's blob, not owned).
    blob_key = KeyField(max_length=MAX_KEY_LENGTH, blank=True, default="")
    #: A record-only artifact's bytes elsewhere: an http(s) URL (a provider's hosted file).
    source_url = models.CharField(max_length=2048, blank=True, default="")
    name = models.CharField(max_length=255, blank=True, default="")
    media_type = models.CharField(max_length=255, default="application/octet-stream")
    #: In bytes; None for a record-only artifact whose size was not given and whose blob was not there yet.
    size = models.PositiveBigIntegerField(null=True, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name = "artifact"
        ordering = ["created_at", "id"]
        indexes = [
            models.Index(fields=["conversation", "created_at", "id"], name="ap_artifact_conv_created"),
            models.Index(fields=["run", "created_at", "id"], name="ap_artifact_run_created"),
            models.Index(fields=["generation_run", "created_at", "id"], name="ap_artifact_genrun_created"),
        ]
        constraints = [
            # Exactly one run: a chat run or a generation run.
            models.CheckConstraint(
                condition=Q(run__isnull=False, generation_run__isnull=True)
                | Q(run__isnull=True, generation_run__isnull=False),
                name="ap_artifact_one_run",
            ),
            # A chat run's artifact belongs to that run's conversation.
            models.CheckConstraint(
                condition=Q(run__isnull=True) | Q(conversation__isnull=False), name="ap_artifact_chat_has_conversation"
            ),
            # Its bytes are somewhere: an owned blob, a blob key, or a source URL.
            models.CheckConstraint(
                condition=Q(blob__isnull=False) | ~Q(blob_key="") | ~Q(source_url=""), name="ap_artifact_has_content"
            ),
        ]

    @property
    def source_run_id(self) -> Any:
        """The id of the run that made it, chat or generation."""
        return self.run_id or self.generation_run_id

    def __str__(self) -> str:
        return self.name or str(self.id)
