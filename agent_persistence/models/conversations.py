"""Conversations and their messages: the durable transcript."""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils import timezone

from ..ids import uuid7
from ..statuses import LastTurnStatus, Role


class Conversation(models.Model):
    """One conversation (session, thread) of one owner in one tenant.

    ``version`` counts updates of the conversation itself (not new messages)
    and is the compare-and-set token of ``update_if``. ``epoch`` is the lease
    generation raised by every claim of a turn. ``next_position`` and
    ``last_event_seq`` are counters handed out under the row's write lock, so
    messages keep insertion order and events number 1, 2, 3 ... without gaps.
    """

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    tenant = models.CharField(max_length=255, blank=True, default="")
    owner = models.CharField(max_length=255, blank=True, default="")
    agent = models.CharField(max_length=255, blank=True, default="")
    title = models.CharField(max_length=500, null=True, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    state = models.JSONField(default=dict, blank=True)
    version = models.PositiveBigIntegerField(default=0)
    last_turn_status = models.CharField(max_length=16, choices=LastTurnStatus.choices, null=True, blank=True)
    action_due_at = models.DateTimeField(null=True, blank=True)
    shared = models.BooleanField(default=False)
    # Mirrors metadata["pinned"] is True, so pinned_first orders in the database.
    pinned = models.BooleanField(default=False, editable=False)
    epoch = models.PositiveBigIntegerField(default=0, editable=False)
    next_position = models.PositiveBigIntegerField(default=0, editable=False)
    # Moved by every message edit and delete (which leave updated_at alone): part of the thread's If-Match tag.
    thread_revision = models.PositiveBigIntegerField(default=0, db_default=0, editable=False)
    last_event_seq = models.PositiveBigIntegerField(default=0, editable=False)
    event_stop_reason = models.CharField(max_length=64, null=True, blank=True, editable=False)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["tenant", "owner", "-created_at", "-id"], name="ap_conv_owner_created"),
            models.Index(fields=["tenant", "owner", "-pinned", "-created_at"], name="ap_conv_owner_pinned"),
            models.Index(
                fields=["tenant", "action_due_at", "created_at"],
                name="ap_conv_action_due",
                condition=Q(action_due_at__isnull=False),
            ),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(last_turn_status__in=LastTurnStatus.values) | Q(last_turn_status__isnull=True),
                name="ap_conv_last_turn_status_valid",
            ),
        ]

    def __str__(self) -> str:
        return self.title or str(self.id)


class Message(models.Model):
    """One message of a transcript, at a fixed per-conversation ``position``."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="messages")
    position = models.PositiveBigIntegerField(editable=False)
    role = models.CharField(max_length=16, choices=Role.choices)
    content = models.JSONField(null=True, blank=True)
    name = models.CharField(max_length=255, null=True, blank=True)
    tool_call_id = models.CharField(max_length=255, null=True, blank=True)
    tool_calls = models.JSONField(null=True, blank=True)
    files = models.JSONField(null=True, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    usage = models.JSONField(null=True, blank=True)
    run = models.ForeignKey("agent_persistence.Run", on_delete=models.SET_NULL, null=True, blank=True, related_name="messages")
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["conversation", "position"]
        constraints = [
            models.UniqueConstraint(fields=["conversation", "position"], name="ap_message_position_unique"),
            models.CheckConstraint(condition=Q(role__in=Role.values), name="ap_message_role_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.role} #{self.position}"
