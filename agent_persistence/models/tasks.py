"""Background tasks, optionally inside a conversation, each with one result."""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils import timezone

from ..ids import uuid7
from ..statuses import TaskStatus


class Task(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    tenant = models.CharField(max_length=255, blank=True, default="")
    owner = models.CharField(max_length=255, blank=True, default="")
    conversation = models.ForeignKey(
        "agent_persistence.Conversation", on_delete=models.CASCADE, null=True, blank=True, related_name="tasks"
    )
    agent = models.CharField(max_length=255, null=True, blank=True)
    title = models.CharField(max_length=500)
    description = models.TextField(null=True, blank=True)
    status = models.CharField(max_length=16, choices=TaskStatus.choices, default=TaskStatus.PENDING)
    comments = models.JSONField(default=list, blank=True)
    callback_url = models.URLField(max_length=2000, null=True, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    error = models.JSONField(null=True, blank=True)
    result = models.JSONField(null=True, blank=True)
    result_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["tenant", "owner", "-created_at", "-id"], name="ap_task_owner_created"),
            # TaskStore.list(conversation_id=...): its (created_at, id) order and keyset cursors, with no sort.
            models.Index(fields=["conversation", "-created_at", "-id"], name="ap_task_conv_created"),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(status__in=TaskStatus.values), name="ap_task_status_valid"),
        ]

    def __str__(self) -> str:
        return self.title
