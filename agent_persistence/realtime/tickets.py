"""Websocket tickets: a short-lived, single-use, signed credential for one socket.

A client authenticated by the API (session, Basic, token: whatever the host's
DRF authentication is) asks ``POST ws-ticket/`` (any conversation it may read)
or ``POST conversations/<id>/ws-ticket/`` (that conversation only) for a
ticket, and opens the socket with ``?ticket=<ticket>``. Scripts, mobile apps
and servers so authenticate a socket without a session cookie.

- **Bound.** The ticket is the id of a :class:`~agent_persistence.models.WebsocketTicket`
  row holding the scope (tenant, user) it was issued to and, optionally, its
  conversation; the socket acts for that scope. The string carries no user id.
- **Signed.** The id is signed with Django's ``Signer`` (``SECRET_KEY``, its own
  salt), so a forged or altered ticket is refused without a query.
- **Short-lived and single-use.** ``WS_TICKET_TTL`` seconds (default 60), and
  spent by one conditional update (``spent_at`` from NULL, before expiry, for
  this conversation): two sockets presenting one ticket, on any replicas, are
  never both accepted.

Every refusal is the same :class:`TicketRefused` (close code ``4403``, no
reason text): a client learns nothing about why, nor whose ticket it was.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import parse_qs

from django.core import signing
from django.db.models import Q
from django.utils import timezone

from ..conf import app_settings
from ..models import WebsocketTicket
from ..scope import Scope

SALT = "agent_persistence.realtime.tickets"
QUERY_PARAMETER = "ticket"


class TicketRefused(Exception):
    """The ticket is expired, spent, unknown, tampered with, or bound to another conversation."""


@dataclass(frozen=True)
class IssuedTicket:
    ticket: str
    expires_at: datetime
    conversation_id: uuid.UUID | None


def issue_ticket(scope: Scope, conversation_id: uuid.UUID | None = None) -> IssuedTicket:
    """A new ticket for ``scope`` (and only ``conversation_id`` when given; the caller checked it is readable)."""
    now = timezone.now()
    row = WebsocketTicket.objects.create(
        tenant=scope.tenant,
        user=scope.user,
        conversation_id=conversation_id,
        created_at=now,
        expires_at=now + timedelta(seconds=app_settings.WS_TICKET_TTL),
    )
    return IssuedTicket(signing.Signer(salt=SALT).sign(row.pk.hex), row.expires_at, conversation_id)


def redeem_ticket(ticket: str, conversation_id: Any) -> Scope:
    """Spend ``ticket`` for a socket to ``conversation_id``; the scope it was issued to, or TicketRefused."""
    try:
        ticket_id = uuid.UUID(hex=signing.Signer(salt=SALT).unsign(ticket))
    except (signing.BadSignature, ValueError):
        raise TicketRefused from None
    target = _uuid_or_none(conversation_id)
    now = timezone.now()
    bound_here = Q(conversation_id__isnull=True) | Q(conversation_id=target) if target else Q(conversation_id__isnull=True)
    spent = WebsocketTicket.objects.filter(bound_here, pk=ticket_id, spent_at__isnull=True, expires_at__gt=now).update(spent_at=now)
    if spent != 1:
        raise TicketRefused
    tenant, user = WebsocketTicket.objects.values_list("tenant", "user").get(pk=ticket_id)
    return Scope(tenant=tenant, user=user)


def ticket_in(channels_scope: dict[str, Any]) -> str | None:
    """The ``?ticket=`` of a websocket's query string (the last one when repeated), or None."""
    query = channels_scope.get("query_string", b"")
    if isinstance(query, bytes):
        query = query.decode("latin-1")
    values = parse_qs(query, keep_blank_values=True).get(QUERY_PARAMETER)
    return values[-1] if values else None


def purge_expired_tickets(*, before: datetime, limit: int) -> int:
    """Delete up to ``limit`` tickets that expired before ``before`` (spent or not); the number deleted."""
    ids = list(WebsocketTicket.objects.filter(expires_at__lt=before).order_by("expires_at").values_list("pk", flat=True)[:limit])
    return WebsocketTicket.objects.filter(pk__in=ids).delete()[0] if ids else 0


def _uuid_or_none(value: Any) -> uuid.UUID | None:
    try:
        return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))
    except ValueError:
        return None
