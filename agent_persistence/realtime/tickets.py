"""Websocket tickets: a short-lived, single-use, signed credential for one socket.

A client authenticated by the API (session, Basic, token: whatever the host's
DRF authentication is) asks ``POST ws-ticket/`` (any conversation it may read)
or ``POST conversations/<id>/ws-ticket/`` (that conversation only) for a
ticket, and opens the socket with ``?ticket=<ticket>``. Scripts, mobile apps
and servers so authenticate a socket without a session cookie.

- **Bound.** The ticket is the id of a ticket of the configured family's
  ticket store (:func:`~agent_persistence.stores.ticket_store`; the ORM one keeps
  a :class:`~agent_persistence.models.WebsocketTicket` row) holding the scope
  (tenant, user) it was issued to and, optionally, its conversation; the socket
  acts for that scope. The string carries no user id.
- **Signed.** The id is signed with Django's ``Signer`` (``SECRET_KEY``, its own
  salt), so a forged or altered ticket is refused without a query.
- **Short-lived and single-use.** ``WS_TICKET_TTL`` seconds (default 60), and
  spent by one conditional update (``spent_at`` from NULL, before expiry, for
  this conversation): two sockets presenting one ticket, on any replicas, are
  never both accepted.

- **For an active user.** The ticket keeps the primary key of the Django user
  of the request that issued it (``account``); a ticket whose user has been
  deactivated or deleted since is refused when it is spent, as Django's own
  authentication refuses an inactive user's session.
- **Capped.** One scope is issued at most ``WS_TICKETS_PER_MINUTE`` tickets in
  any 60 seconds (counted by the ticket store, so across replicas on a shared database); the
  next is :class:`~agent_persistence.exceptions.TooManyRequests`
  (``too_many_tickets``, 429 with ``Retry-After``).

Every refusal is the same :class:`TicketRefused` (close code ``4403``, no
reason text): a client learns nothing about why, nor whose ticket it was.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import parse_qs

from django.contrib.auth import get_user_model
from django.core import signing
from django.core.exceptions import FieldDoesNotExist, ValidationError
from django.db.models import Q

from ..conf import app_settings
from ..scope import Scope
from ..stores import ticket_store
from ..stores.rules.tickets import CAP_WINDOW as CAP_WINDOW  # the window of WS_TICKETS_PER_MINUTE

SALT = "agent_persistence.realtime.tickets"
QUERY_PARAMETER = "ticket"


class TicketRefused(Exception):
    """The ticket is expired, spent, unknown, tampered with, or bound to another conversation."""


@dataclass(frozen=True)
class IssuedTicket:
    ticket: str
    expires_at: datetime
    conversation_id: uuid.UUID | None


def issue_ticket(scope: Scope, conversation_id: uuid.UUID | None = None, *, account: str = "") -> IssuedTicket:
    """A new ticket for ``scope`` (and only ``conversation_id`` when given; the caller checked it is readable).

    ``account`` is the primary key of the Django user the ticket is issued to
    ("" when the scope stands for no Django user): that user must still be
    active when the ticket is spent. TooManyRequests when the scope was issued
    ``WS_TICKETS_PER_MINUTE`` tickets in the last minute.
    """
    ticket = ticket_store().issue(
        scope, conversation_id=conversation_id, account=account,
        ttl=app_settings.WS_TICKET_TTL, per_minute=app_settings.WS_TICKETS_PER_MINUTE,
    )
    return IssuedTicket(signing.Signer(salt=SALT).sign(ticket.pk.hex), ticket.expires_at, conversation_id)


def redeem_ticket(ticket: str, conversation_id: Any) -> Scope:
    """Spend ``ticket`` for a socket to ``conversation_id``; the scope it was issued to, or TicketRefused."""
    try:
        ticket_id = uuid.UUID(hex=signing.Signer(salt=SALT).unsign(ticket))
    except (signing.BadSignature, ValueError):
        raise TicketRefused from None
    spent = ticket_store().redeem(ticket_id, conversation_id)
    if spent is None:
        raise TicketRefused
    if spent.account and not _is_active(spent.account):
        raise TicketRefused
    return Scope(tenant=spent.tenant, user=spent.user)


def _is_active(account: str) -> bool:
    """Whether the Django user with primary key ``account`` exists and is active (when its model says)."""
    model = get_user_model()
    try:
        model._meta.get_field("is_active")
    except FieldDoesNotExist:
        active = Q()  # a user model without the field: every user is active (AbstractBaseUser's default)
    else:
        active = Q(is_active=True)
    try:
        return model._default_manager.filter(active, pk=account).exists()
    except (ValueError, TypeError, ValidationError):
        return False  # a key the model's primary key cannot be


def ticket_in(channels_scope: dict[str, Any]) -> str | None:
    """The ``?ticket=`` of a websocket's query string (the last one when repeated), or None."""
    query = channels_scope.get("query_string", b"")
    if isinstance(query, bytes):
        query = query.decode("latin-1")
    values = parse_qs(query, keep_blank_values=True).get(QUERY_PARAMETER)
    return values[-1] if values else None


def purge_expired_tickets(*, before: datetime, limit: int) -> int:
    """Delete up to ``limit`` tickets that expired before ``before`` (spent or not); the number deleted."""
    return ticket_store().purge_expired(before=before, limit=limit)
