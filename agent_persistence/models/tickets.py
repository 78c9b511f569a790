"""Websocket tickets: short-lived, single-use credentials for a socket, bound to a scope."""

from __future__ import annotations

from django.db import models
from django.db.models import F, Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from ..ids import uuid7


class WebsocketTicket(models.Model):
    """One ticket: issued over the API, spent by the first socket that presents it.

    The ticket string a client holds is this row's id, signed; it carries no
    user id. ``spent_at`` is set by one conditional update, so two sockets
    that present the same ticket, on any replicas, cannot both be accepted.
    """

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    tenant = models.CharField(max_length=255, blank=True, default="")
    user = models.CharField(max_length=255, help_text=_("The scope's user id string the socket acts for."))
    account = models.CharField(
        max_length=255, blank=True, default="",
        help_text=_("The primary key of the Django user the ticket was issued to; it must still be active when the ticket is spent."),
    )
    conversation_id = models.UUIDField(null=True, blank=True, help_text=_("The only conversation it opens; any readable one when empty."))
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    spent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["expires_at"], name="ap_wsticket_expires"),
            models.Index(fields=["tenant", "user", "created_at"], name="ap_wsticket_issued"),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(expires_at__gte=F("created_at")), name="ap_wsticket_expires_after_creation"),
        ]

    def __str__(self) -> str:
        return f"websocket ticket {self.id}"
