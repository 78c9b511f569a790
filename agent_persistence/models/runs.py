"""Runs of the agent loop and the human-in-the-loop interrupts they raise."""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from ..ids import uuid7
from ..statuses import FINISHED_RUN_STATUSES, InterruptKind, InterruptStatus, RunStatus
from .conversations import Conversation


class Run(models.Model):
    """One drive of the agent loop for the turn answered by ``message_id``."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="runs")
    message_id = models.UUIDField(help_text=_("The assistant message that answers this turn."))
    parent = models.ForeignKey("self", on_delete=models.CASCADE, null=True, blank=True, related_name="children")
    name = models.CharField(max_length=255, blank=True, default="")
    status = models.CharField(max_length=16, choices=RunStatus.choices, default=RunStatus.RUNNING)
    started_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)
    usage = models.JSONField(default=dict, blank=True)
    error = models.JSONField(null=True, blank=True)
    detached_since = models.DateTimeField(null=True, blank=True)
    cancel_requested = models.BooleanField(default=False)
    epoch = models.PositiveBigIntegerField(default=0)
    transcript = models.JSONField(
        default=list,
        blank=True,
        help_text=_("A subagent's own messages (text, tool calls and results), oldest first; never the model's transcript."),
    )

    class Meta:
        ordering = ["-started_at", "-id"]
        indexes = [
            models.Index(fields=["conversation", "status", "-started_at"], name="ap_run_conv_status"),
            # RunStore.list: a conversation's runs in (started_at, id) order, and its keyset cursors.
            models.Index(fields=["conversation", "-started_at", "-id"], name="ap_run_conv_started"),
            # A turn's runs (conversation and message_id), and whether any run answers under a message id.
            models.Index(fields=["message_id", "conversation"], name="ap_run_turn"),
            # RunStore.list_reclaimable: running runs nobody follows, by how long.
            models.Index(
                fields=["detached_since"],
                name="ap_run_reclaimable",
                condition=Q(status="running", detached_since__isnull=False),
            ),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(status__in=RunStatus.values), name="ap_run_status_valid"),
            models.CheckConstraint(
                condition=Q(status__in=FINISHED_RUN_STATUSES, finished_at__isnull=False)
                | (~Q(status__in=FINISHED_RUN_STATUSES) & Q(finished_at__isnull=True)),
                name="ap_run_finished_at_iff_finished",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name or 'run'} {self.id} ({self.status})"


class Interrupt(models.Model):
    """A question a run asked a person (or the client), answered at most once."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="interrupts")
    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="interrupts")
    kind = models.CharField(max_length=16, choices=InterruptKind.choices, default=InterruptKind.GENERIC)
    payload = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=16, choices=InterruptStatus.choices, default=InterruptStatus.PENDING)
    response = models.JSONField(null=True, blank=True)
    requested_at = models.DateTimeField(default=timezone.now)
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolved_by = models.CharField(max_length=255, null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    epoch = models.PositiveBigIntegerField(default=0)

    class Meta:
        ordering = ["requested_at", "id"]
        indexes = [
            models.Index(
                fields=["conversation", "requested_at"],
                name="ap_interrupt_pending",
                condition=Q(status="pending"),
            ),
            models.Index(fields=["run", "requested_at"], name="ap_interrupt_run"),
            models.Index(
                fields=["expires_at"],
                name="ap_interrupt_expiry",
                condition=Q(status="pending", expires_at__isnull=False),
            ),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(kind__in=InterruptKind.values), name="ap_interrupt_kind_valid"),
            models.CheckConstraint(condition=Q(status__in=InterruptStatus.values), name="ap_interrupt_status_valid"),
            models.CheckConstraint(
                condition=Q(status="pending", resolved_at__isnull=True) | (~Q(status="pending") & Q(resolved_at__isnull=False)),
                name="ap_interrupt_resolved_at_iff_answered",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.id} ({self.status})"
