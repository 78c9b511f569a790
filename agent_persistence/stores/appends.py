"""One-statement appends on PostgreSQL: the counter claim and the insert in one round trip.

A message append (:meth:`ConversationStore.append_message`) and an event
append (:meth:`EventStore.append`) each move a counter of the conversation row
(``next_position``, ``last_event_seq``) and insert rows numbered from it. On
PostgreSQL both writes are one statement, a data-modifying CTE::

    WITH claim AS (UPDATE conversation SET counter = counter + n ... WHERE id, tenant, owner RETURNING counter)
    INSERT INTO message_or_event (...) SELECT ..., claim.counter ... FROM claim

The UPDATE takes the row's write lock (held until the statement's commit, so
the numbers are handed out gap-free in commit order, as before) and, matching
no row, makes the INSERT insert nothing: the statement writes nothing at all
and the caller takes its general path, which tells NotFound from
ConversationNotOwned or creates the conversation. Outside a transaction the
statement commits on its own (no ``BEGIN`` / ``COMMIT`` round trips); inside
the caller's transaction it runs in a savepoint, so a refused insert
(``IntegrityError``) rolls back only the append.

SQLite has no data-modifying CTEs: there the stores keep their two-statement
path in a transaction (:func:`enabled` is False).
"""

from __future__ import annotations

import uuid
from contextlib import nullcontext
from datetime import datetime
from typing import Any, ContextManager, Sequence

from django.db import connection, transaction

from ..models import Conversation, Event, Message, Run
from ..scope import Scope

CONVERSATION = Conversation._meta.db_table
MESSAGE = Message._meta.db_table
EVENT = Event._meta.db_table
RUN = Run._meta.db_table

#: Message columns written by an append, after ``id, conversation_id, position``.
MESSAGE_FIELDS = ("role", "content", "name", "tool_call_id", "tool_calls", "files", "metadata", "usage")
JSON_MESSAGE_FIELDS = frozenset({"content", "tool_calls", "files", "metadata", "usage"})

CLAIM_POSITION = f"""
UPDATE {CONVERSATION} SET next_position = next_position + 1, updated_at = %s
WHERE id = %s AND tenant = %s AND owner = %s{{run_check}}
RETURNING next_position - 1 AS position
"""
RUN_CHECK = f" AND EXISTS (SELECT 1 FROM {RUN} WHERE id = %s AND conversation_id = %s)"
APPEND_MESSAGE = (
    "WITH claim AS ({claim}) "
    f"INSERT INTO {MESSAGE} (id, conversation_id, position, {', '.join(MESSAGE_FIELDS)}, run_id, created_at, updated_at) "
    f"SELECT %s, %s, claim.position, {', '.join(['%s'] * len(MESSAGE_FIELDS))}, %s, %s, %s FROM claim "
    "RETURNING position"
)
APPEND_EVENTS = (
    "WITH claim AS ("
    f"UPDATE {CONVERSATION} SET last_event_seq = last_event_seq + %s{{stop_reason}} "
    "WHERE id = %s AND tenant = %s AND owner = %s RETURNING last_event_seq) "
    f"INSERT INTO {EVENT} (conversation_id, seq, type, data, run_id, created_at) "
    "SELECT %s, claim.last_event_seq - %s + batch.ordinal, batch.type, batch.data::jsonb, batch.run_id::uuid, %s "
    "FROM claim, (VALUES {rows}) AS batch (ordinal, type, data, run_id) "
    "RETURNING id, seq"
)


def enabled() -> bool:
    """Whether appends take the one-statement path (PostgreSQL)."""
    return connection.vendor == "postgresql"


def unit() -> ContextManager[Any]:
    """A savepoint inside the caller's transaction; nothing outside one (the statement commits alone)."""
    return transaction.atomic() if connection.in_atomic_block else nullcontext()


def json_param(value: Any) -> Any:
    return None if value is None else connection.ops.adapt_json_value(value, None)


def append_message(scope: Scope, pk: uuid.UUID, message: Any, now: datetime) -> Message | None:
    """Claim the next position of the scope's own conversation and insert ``message`` there, in one statement.

    ``message`` is a cleaned :class:`~.conversations.MessageInput`. None (and
    nothing written) when the scope does not own the conversation or the
    message's run is not one of its runs. A taken id raises IntegrityError.
    """
    run_check = RUN_CHECK if message.run_id is not None else ""
    claim_params: list[Any] = [now, pk, scope.tenant, scope.user]
    if message.run_id is not None:
        claim_params += [message.run_id, pk]
    fields = message.fields
    values = [json_param(fields[name]) if name in JSON_MESSAGE_FIELDS else fields[name] for name in MESSAGE_FIELDS]
    sql = APPEND_MESSAGE.format(claim=CLAIM_POSITION.format(run_check=run_check))
    with connection.cursor() as cursor:
        cursor.execute(sql, [*claim_params, message.id, pk, *values, message.run_id, now, now])
        row = cursor.fetchone()
    if row is None:
        return None
    return stored(
        Message(id=message.id, conversation_id=pk, position=row[0], run_id=message.run_id, created_at=now,
                updated_at=now, **fields)
    )


def append_events(
    scope: Scope, pk: uuid.UUID, batch: Sequence[Any], now: datetime, *, stop_reason: Any = None,
    sets_stop_reason: bool = False,
) -> list[Event] | None:
    """Number ``batch`` after the scope's own conversation's last seq and insert it, in one statement.

    ``batch`` holds cleaned events (``type``, ``data``, ``run_id``); with
    ``sets_stop_reason`` the conversation's ``event_stop_reason`` becomes
    ``stop_reason`` in the same UPDATE. None (and nothing written) when the
    scope does not own the conversation.
    """
    assignment = ", event_stop_reason = %s" if sets_stop_reason else ""
    sql = APPEND_EVENTS.format(stop_reason=assignment, rows=", ".join(["(%s, %s, %s, %s)"] * len(batch)))
    params: list[Any] = [len(batch)]
    if sets_stop_reason:
        params.append(stop_reason)
    params += [pk, scope.tenant, scope.user, pk, len(batch), now]
    for ordinal, event in enumerate(batch, start=1):
        params += [ordinal, event.type, json_param(event.data), event.run_id]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        numbered = {seq: event_id for event_id, seq in cursor.fetchall()}
    if not numbered:
        return None
    first_seq = min(numbered)
    return [
        stored(
            Event(id=numbered[first_seq + offset], conversation_id=pk, seq=first_seq + offset, type=event.type,
                  data=event.data, run_id=event.run_id, created_at=now)
        )
        for offset, event in enumerate(batch)
    ]


def stored(row: Any) -> Any:
    """Mark a model instance built from values just written as loaded from the database."""
    row._state.adding = False
    row._state.db = connection.alias
    return row
