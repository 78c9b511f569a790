"""The per-conversation ordered event log and generic keyed leases."""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils import timezone


class Event(models.Model):
    """One entry of a conversation's log, numbered 1, 2, 3 ... by ``seq``."""

    conversation = models.ForeignKey("agent_persistence.Conversation", on_delete=models.CASCADE, related_name="events")
    seq = models.PositiveBigIntegerField()
    type = models.CharField(max_length=100)
    data = models.JSONField(default=dict, blank=True)
    run_id = models.UUIDField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["conversation", "seq"]
        indexes = [models.Index(fields=["created_at"], name="ap_event_created")]
        constraints = [
            models.UniqueConstraint(fields=["conversation", "seq"], name="ap_event_seq_unique"),
            models.CheckConstraint(condition=Q(seq__gte=1), name="ap_event_seq_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.conversation_id} #{self.seq} {self.type}"


class Lease(models.Model):
    """A keyed, expiring lock held by one ``holder`` at a time."""

    tenant = models.CharField(max_length=255, blank=True, default="")
    key = models.CharField(max_length=255)
    holder = models.CharField(max_length=255)
    acquired_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    cancel_requested = models.BooleanField(default=False)
    metadata = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["tenant", "key"]
        indexes = [models.Index(fields=["tenant", "expires_at"], name="ap_lease_expiry")]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "key"], name="ap_lease_key_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.key} ({self.holder})"
