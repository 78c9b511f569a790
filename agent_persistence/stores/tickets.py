"""The ticket store: short-lived, single-use websocket tickets, one row each.

A ticket is spent by one conditional UPDATE (``spent_at`` from NULL, before
expiry, for a conversation it opens) whose row count says whether this call
spent it, so two redeems of one ticket, on any replicas, never both succeed,
on PostgreSQL or SQLite. The realtime edge (:mod:`agent_persistence.realtime.tickets`)
signs the ids and checks the ticket's Django user; this store keeps the rows.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.models import Q
from django.utils import timezone

from ..models import WebsocketTicket
from ..scope import Scope
from .protocols import TicketStoreProtocol
from .rules.tickets import CAP_WINDOW, check_cap, clean_issue, expiry, target_of
from .twins import twins_of


class TicketStore(twins_of(TicketStoreProtocol)):
    """Issue, redeem and purge websocket tickets in the ``WebsocketTicket`` table."""

    def issue(
        self, scope: Scope, *, conversation_id: Any = None, account: str = "", ttl: float, per_minute: int | None = None,
        now: datetime | None = None,
    ) -> WebsocketTicket:
        target, now = clean_issue(scope, conversation_id, now)
        if per_minute is not None:
            issued = WebsocketTicket.objects.filter(tenant=scope.tenant, user=scope.user, created_at__gt=now - CAP_WINDOW)
            check_cap(list(issued.order_by("-created_at").values_list("created_at", flat=True)[:per_minute]), per_minute, now)
        return WebsocketTicket.objects.create(
            tenant=scope.tenant, user=scope.user, account=account, conversation_id=target,
            created_at=now, expires_at=expiry(now, ttl),
        )

    def redeem(self, ticket_id: Any, conversation_id: Any = None, *, now: datetime | None = None) -> WebsocketTicket | None:
        ticket_pk, target = target_of(ticket_id), target_of(conversation_id)
        if ticket_pk is None:
            return None
        now = now or timezone.now()
        opens_here = Q(conversation_id__isnull=True) | Q(conversation_id=target) if target else Q(conversation_id__isnull=True)
        spent = WebsocketTicket.objects.filter(opens_here, pk=ticket_pk, spent_at__isnull=True, expires_at__gt=now).update(spent_at=now)
        if spent != 1:
            return None
        return WebsocketTicket.objects.get(pk=ticket_pk)

    def purge_expired(self, *, before: datetime, limit: int) -> int:
        ids = list(WebsocketTicket.objects.filter(expires_at__lt=before).order_by("expires_at").values_list("pk", flat=True)[:limit])
        return WebsocketTicket.objects.filter(pk__in=ids).delete()[0] if ids else 0
