"""The backend-neutral rules of websocket tickets: the per-minute cap, the expiry, which socket a ticket opens.

The ORM ticket store (:mod:`agent_persistence.stores.tickets`) and its
in-memory twin import these; nothing here reads or writes a table. Signing a
ticket and checking its Django user are the realtime edge's
(:mod:`agent_persistence.realtime.tickets`).
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from ...exceptions import TooManyRequests
from ...scope import Scope
from .base import check_scope

#: The window of ``WS_TICKETS_PER_MINUTE``.
CAP_WINDOW = timedelta(minutes=1)


def check_cap(issued: list[datetime], per_minute: int | None, now: datetime) -> None:
    """TooManyRequests (``too_many_tickets``) when ``issued`` (the scope's newest issue times, newest first) fills the cap.

    ``issued`` holds at most ``per_minute`` times, all within :data:`CAP_WINDOW`
    of ``now``; the retry comes when the oldest of them leaves the window.
    """
    if per_minute is not None and len(issued) >= per_minute:
        raise TooManyRequests(
            "Too many websocket tickets; try again later.", code="too_many_tickets",
            retry_after=(issued[-1] + CAP_WINDOW - now).total_seconds(),
        )


def clean_issue(scope: Scope, conversation_id: Any, now: datetime | None) -> tuple[uuid.UUID | None, datetime]:
    """The checked scope's ticket target (None: any readable conversation) and the issue time."""
    check_scope(scope)
    return target_of(conversation_id), now or timezone.now()


def target_of(value: Any) -> uuid.UUID | None:
    """``value`` as a conversation id, or None when it is none (a ticket bound to it then opens nothing)."""
    if value is None or isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(str(value))
    except ValueError:
        return None


def expiry(now: datetime, ttl: float) -> datetime:
    return now + timedelta(seconds=ttl)


def opens(ticket_conversation_id: uuid.UUID | None, target: uuid.UUID | None) -> bool:
    """Whether a ticket bound to ``ticket_conversation_id`` (None: unbound) opens a socket to ``target``."""
    return ticket_conversation_id is None or (target is not None and ticket_conversation_id == target)
