"""Per-conversation turn state: supervision, stream recording, checkpoints.

Each is one row per conversation, overwritten in place and guarded by the
conversation's lease ``epoch``: a producer whose epoch is no longer the stored
one can no longer write any of them.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from ..fields import JSONTextField
from ..statuses import SupervisionStatus
from .conversations import Conversation


class TurnSupervision(models.Model):
    """Who produces the conversation's turn, and the heartbeat that says it lives.

    No "dead" status is stored: a reader judges a RUNNING row whose heartbeat
    is older than ``DEAD_AFTER`` seconds as a dead producer.
    """

    conversation = models.OneToOneField(
        Conversation, on_delete=models.CASCADE, primary_key=True, related_name="supervision"
    )
    status = models.CharField(max_length=16, choices=SupervisionStatus.choices, default=SupervisionStatus.RUNNING)
    heartbeat_at = models.DateTimeField(default=timezone.now)
    message_id = models.UUIDField()
    run_id = models.UUIDField(null=True, blank=True)
    epoch = models.PositiveBigIntegerField()
    replica = models.CharField(max_length=255, blank=True, default="")
    claimed_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name = _("turn supervision")
        verbose_name_plural = _("turn supervision")
        indexes = [
            # The running rows, by a column no heartbeat changes: a heartbeat is then a HOT update (no index entries).
            models.Index(fields=["conversation"], name="ap_supervision_live", condition=Q(status="running")),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(status__in=SupervisionStatus.values), name="ap_supervision_status_valid"),
            models.CheckConstraint(condition=Q(epoch__gte=1), name="ap_supervision_epoch_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.conversation_id} @{self.epoch} ({self.status})"


class StreamRecording(models.Model):
    """The latest cumulative snapshot of the in-flight assistant message."""

    conversation = models.OneToOneField(
        Conversation, on_delete=models.CASCADE, primary_key=True, related_name="recording"
    )
    message_id = models.UUIDField()
    index = models.PositiveBigIntegerField(default=0)
    message = models.JSONField(default=dict)
    epoch = models.PositiveBigIntegerField(default=0)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [models.Index(fields=["updated_at"], name="ap_recording_updated")]

    def __str__(self) -> str:
        return f"{self.conversation_id} #{self.index}"


class AgentCheckpoint(models.Model):
    """The agent's working state, ``{state_key: blob}``, replaced whole on save."""

    conversation = models.OneToOneField(
        Conversation, on_delete=models.CASCADE, primary_key=True, related_name="checkpoint"
    )
    state = JSONTextField(default=dict, help_text=_("The state's JSON, as text (written whole, read whole)."))
    size = models.PositiveBigIntegerField(default=0, help_text=_("UTF-8 bytes of the state's JSON."))
    message_id = models.UUIDField(null=True, blank=True)
    epoch = models.PositiveBigIntegerField(default=0)
    saved_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.conversation_id} ({self.size} bytes)"
