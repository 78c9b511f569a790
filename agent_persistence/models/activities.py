"""Activity rows: the AG-UI activity messages of a conversation (a search progress card, a checklist).

An activity is structured progress a client renders as its own row
(``role: "activity"``); it is never part of the transcript the model reads.
A conversation's activities form one ordered list, saved as a whole or one
row at a time, and returned on reload beside the messages.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from .conversations import Conversation


class Activity(models.Model):
    """One activity row of a conversation, at a dense per-conversation ``position``.

    ``activity_id`` is the AG-UI ``messageId`` of the row (unique within the
    conversation); ``message_id`` and ``run_id`` name the turn and the run that
    produced it, when one did. ``revision`` rises with every write of the row,
    so a follower never applies an older snapshot over a newer one.
    """

    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="activities")
    activity_id = models.UUIDField()
    position = models.PositiveIntegerField()
    activity_type = models.CharField(max_length=255)
    content = models.JSONField(default=dict)
    metadata = models.JSONField(default=dict, blank=True)
    message_id = models.UUIDField(null=True, blank=True)
    run_id = models.UUIDField(null=True, blank=True)
    revision = models.PositiveBigIntegerField(default=1)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name = _("activity")
        verbose_name_plural = _("activities")
        ordering = ["conversation", "position"]
        constraints = [
            models.UniqueConstraint(fields=["conversation", "position"], name="ap_activity_position_unique"),
            models.UniqueConstraint(fields=["conversation", "activity_id"], name="ap_activity_id_unique"),
            models.CheckConstraint(condition=Q(revision__gte=1), name="ap_activity_revision_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.activity_type} #{self.position}"
