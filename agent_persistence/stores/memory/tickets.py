"""The in-memory ticket store: websocket tickets in a :class:`MemoryDatabase`, spent under the family's lock."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.utils import timezone

from ...ids import uuid7
from ...models import WebsocketTicket
from ...scope import Scope
from ..protocols import TicketStoreProtocol
from ..rules.tickets import CAP_WINDOW, check_cap, clean_issue, expiry, opens, target_of
from ..twins import twins_of
from .database import DEFAULT_DATABASE, MemoryDatabase, clone


class MemoryTicketStore(twins_of(TicketStoreProtocol)):
    """Issue, redeem and purge websocket tickets; one check-and-spend under the lock admits one redeem."""

    def __init__(self, database: MemoryDatabase | None = None) -> None:
        self.db = database or DEFAULT_DATABASE

    def issue(
        self, scope: Scope, *, conversation_id: Any = None, account: str = "", ttl: float, per_minute: int | None = None,
        now: datetime | None = None,
    ) -> WebsocketTicket:
        target, now = clean_issue(scope, conversation_id, now)
        with self.db.lock:
            if per_minute is not None:
                issued = sorted(
                    (row.created_at for row in self.db.tickets.values()
                     if (row.tenant, row.user) == (scope.tenant, scope.user) and row.created_at > now - CAP_WINDOW),
                    reverse=True,
                )
                check_cap(issued[:per_minute], per_minute, now)
            ticket = WebsocketTicket(
                id=uuid7(), tenant=scope.tenant, user=scope.user, account=account, conversation_id=target,
                created_at=now, expires_at=expiry(now, ttl),
            )
            self.db.tickets[ticket.pk] = ticket
            return clone(ticket)

    def redeem(self, ticket_id: Any, conversation_id: Any = None, *, now: datetime | None = None) -> WebsocketTicket | None:
        ticket_pk, target = target_of(ticket_id), target_of(conversation_id)
        now = now or timezone.now()
        with self.db.lock:
            ticket = self.db.tickets.get(ticket_pk) if ticket_pk is not None else None
            if ticket is None or ticket.spent_at is not None or ticket.expires_at <= now or not opens(ticket.conversation_id, target):
                return None
            ticket.spent_at = now
            return clone(ticket)

    def purge_expired(self, *, before: datetime, limit: int) -> int:
        with self.db.lock:
            expired = sorted((row for row in self.db.tickets.values() if row.expires_at < before), key=lambda row: row.expires_at)
            for row in expired[:limit]:
                del self.db.tickets[row.pk]
            return len(expired[:limit])
