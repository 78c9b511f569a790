"""LangGraph checkpoint history: checkpoints, channel blobs and pending writes per thread.

The rows behind :class:`agent_persistence.integrations.langgraph_store.DjangoCheckpointSaver`.
They follow LangGraph's own storage layout (as its PostgreSQL saver does): a
checkpoint row without its channel values, one blob per (channel, version), so
a channel that did not change is not copied into every checkpoint, and the
writes of each task keyed by (task, index). ``thread_id`` is LangGraph's
string; a thread driven as a durable turn is also linked to its conversation,
so deleting the conversation deletes its graph history.
"""

from __future__ import annotations

from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from .conversations import Conversation


class GraphCheckpoint(models.Model):
    """One checkpoint of one namespace of one LangGraph thread (channel values excluded)."""

    thread_id = models.CharField(max_length=255)
    checkpoint_ns = models.CharField(max_length=255, blank=True, default="")
    checkpoint_id = models.CharField(max_length=64)
    parent_checkpoint_id = models.CharField(max_length=64, null=True, blank=True)
    checkpoint_type = models.CharField(max_length=32)
    checkpoint = models.BinaryField()
    metadata = models.JSONField(default=dict, blank=True)
    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, null=True, blank=True, related_name="graph_checkpoints"
    )
    #: The lease epoch and the turn of the producer that wrote it (None outside a turn).
    epoch = models.PositiveBigIntegerField(null=True, blank=True)
    message_id = models.UUIDField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name = _("graph checkpoint")
        constraints = [
            models.UniqueConstraint(fields=["thread_id", "checkpoint_ns", "checkpoint_id"], name="ap_graph_checkpoint_unique"),
        ]
        indexes = [
            models.Index(fields=["thread_id", "checkpoint_ns", "-checkpoint_id"], name="ap_graph_checkpoint_latest"),
        ]

    def __str__(self) -> str:
        return f"{self.thread_id}/{self.checkpoint_ns}/{self.checkpoint_id}"


class GraphBlob(models.Model):
    """The value of one channel at one version, shared by every checkpoint that has that version."""

    thread_id = models.CharField(max_length=255)
    checkpoint_ns = models.CharField(max_length=255, blank=True, default="")
    channel = models.CharField(max_length=255)
    version = models.CharField(max_length=64)
    value_type = models.CharField(max_length=32)
    value = models.BinaryField(null=True, blank=True)
    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, null=True, blank=True, related_name="graph_blobs"
    )

    class Meta:
        verbose_name = _("graph channel blob")
        constraints = [
            models.UniqueConstraint(fields=["thread_id", "checkpoint_ns", "channel", "version"], name="ap_graph_blob_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.thread_id}/{self.checkpoint_ns}/{self.channel}@{self.version}"


class GraphWrite(models.Model):
    """A pending write of one task against one checkpoint (``idx`` < 0: errors, interrupts, resumes)."""

    thread_id = models.CharField(max_length=255)
    checkpoint_ns = models.CharField(max_length=255, blank=True, default="")
    checkpoint_id = models.CharField(max_length=64)
    task_id = models.CharField(max_length=255)
    task_path = models.CharField(max_length=1024, blank=True, default="")
    idx = models.IntegerField()
    channel = models.CharField(max_length=255)
    value_type = models.CharField(max_length=32)
    value = models.BinaryField(null=True, blank=True)
    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, null=True, blank=True, related_name="graph_writes"
    )

    class Meta:
        verbose_name = _("graph pending write")
        constraints = [
            models.UniqueConstraint(
                fields=["thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "idx"], name="ap_graph_write_unique"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.thread_id}/{self.checkpoint_id}/{self.task_id}#{self.idx}"
