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
path in a transaction. The stores reach these through the PostgreSQL dialect
(:class:`.dialect.PostgresDialect`), which runs each in :func:`unit`.
"""

from __future__ import annotations

import uuid
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ContextManager, Sequence

from django.db import connection, transaction

from ...models import Conversation, Event, Message, Run, StreamRecording, TurnSupervision
from ...scope import Scope
from ...statuses import LastTurnStatus, RunStatus, SupervisionStatus

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


# -- a turn's start in a new conversation ---------------------------------------------------------

SUPERVISION = TurnSupervision._meta.db_table

START_IN_NEW_CONVERSATION = (
    "WITH conversation AS ("
    f"INSERT INTO {CONVERSATION} (id, tenant, owner, agent, title, metadata, state, version, last_turn_status, "
    "action_due_at, shared, pinned, epoch, next_position, last_event_seq, event_stop_reason, created_at, updated_at) "
    "VALUES (%s, %s, %s, %s, NULL, '{{}}', '{{}}', 0, %s, NULL, false, false, 1, 1, %s, NULL, %s, %s) "
    "ON CONFLICT (id) DO NOTHING RETURNING id), "
    "supervision AS ("
    f"INSERT INTO {SUPERVISION} (conversation_id, status, heartbeat_at, message_id, run_id, epoch, replica, claimed_at) "
    "SELECT id, %s, %s, %s, %s, 1, %s, %s FROM conversation), "
    "message AS ("
    f"INSERT INTO {MESSAGE} (id, conversation_id, position, {', '.join(MESSAGE_FIELDS)}, run_id, created_at, updated_at) "
    f"SELECT %s, id, 0, {', '.join(['%s'] * len(MESSAGE_FIELDS))}, NULL, %s, %s FROM conversation), "
    "run AS ("
    f"INSERT INTO {RUN} (id, conversation_id, message_id, parent_id, name, status, started_at, finished_at, usage, "
    "error, detached_since, cancel_requested, epoch, transcript) "
    "SELECT %s, id, %s, NULL, %s, %s, %s, NULL, '{{}}', NULL, NULL, false, 1, '[]' FROM conversation), "
    "events AS ("
    f"INSERT INTO {EVENT} (conversation_id, seq, type, data, run_id, created_at) "
    "SELECT conversation.id, batch.seq, batch.type, batch.data::jsonb, %s, %s "
    "FROM conversation, (VALUES {rows}) AS batch (seq, type, data)) "
    "SELECT id FROM conversation"
)


def start_in_new_conversation(
    scope: Scope, pk: uuid.UUID, *, agent: str, message: Any, message_id: uuid.UUID, run_id: uuid.UUID,
    replica: str, events: Sequence[dict[str, Any]], now: datetime,
) -> Message | None:
    """A turn's start when ``pk`` names no conversation yet: every row of it in one statement, at epoch 1.

    The conversation (``last_turn_status`` running, one message, ``len(events)``
    events), its supervision row, the user ``message`` at position 0, the run
    and the ``events`` (typed dicts, none of them idle). The stored user message;
    None, with nothing written, when a conversation with this id exists
    (whoever's): the caller takes the general path, which locks it.
    """
    fields = message.fields
    values = [json_param(fields[name]) if name in JSON_MESSAGE_FIELDS else fields[name] for name in MESSAGE_FIELDS]
    params: list[Any] = [pk, scope.tenant, scope.user, agent, LastTurnStatus.RUNNING.value, len(events), now, now]
    params += [SupervisionStatus.RUNNING.value, now, message_id, run_id, replica, now]
    params += [message.id, *values, now, now]
    params += [run_id, message_id, agent, RunStatus.RUNNING.value, now]
    params += [run_id, now]
    for seq, event in enumerate(events, start=1):
        params += [seq, event["type"], json_param(event["data"])]
    sql = START_IN_NEW_CONVERSATION.format(rows=", ".join(["(%s, %s, %s)"] * len(events)))
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        created = cursor.fetchone()
    if created is None:
        return None
    return stored(
        Message(id=message.id, conversation_id=pk, position=0, run_id=None, created_at=now, updated_at=now, **fields)
    )


# -- a turn's start in a locked conversation ------------------------------------------------------

CLAIM_NEW_ROW = (
    f"INSERT INTO {SUPERVISION} (conversation_id, status, heartbeat_at, message_id, run_id, epoch, replica, claimed_at) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s) RETURNING 1"
)
CLAIM_ROW = (
    f"UPDATE {SUPERVISION} SET status = %s, heartbeat_at = %s, message_id = %s, run_id = %s, epoch = %s, replica = %s, "
    "claimed_at = %s WHERE conversation_id = %s AND epoch = %s RETURNING 1"
)
START_IN_LOCKED_CONVERSATION = (
    "WITH supervision AS ({claim}), "
    "conversation AS ("
    f"UPDATE {CONVERSATION} SET next_position = next_position + 1, epoch = %s, last_turn_status = %s, updated_at = %s, "
    "last_event_seq = last_event_seq + %s, event_stop_reason = NULL "
    "WHERE id = %s AND tenant = %s AND owner = %s AND EXISTS (SELECT 1 FROM supervision) "
    "RETURNING next_position - 1 AS position, last_event_seq - %s AS seq), "
    "message AS ("
    f"INSERT INTO {MESSAGE} (id, conversation_id, position, {', '.join(MESSAGE_FIELDS)}, run_id, created_at, updated_at) "
    f"SELECT %s, %s, conversation.position, {', '.join(['%s'] * len(MESSAGE_FIELDS))}, NULL, %s, %s FROM conversation), "
    "run AS ("
    f"INSERT INTO {RUN} (id, conversation_id, message_id, parent_id, name, status, started_at, finished_at, usage, "
    "error, detached_since, cancel_requested, epoch, transcript) "
    "SELECT %s, %s, %s, NULL, %s, %s, %s, NULL, '{{}}', NULL, NULL, false, %s, '[]' FROM conversation), "
    "events AS ("
    f"INSERT INTO {EVENT} (conversation_id, seq, type, data, run_id, created_at) "
    "SELECT %s, conversation.seq + batch.ordinal, batch.type, batch.data::jsonb, %s, %s "
    "FROM conversation, (VALUES {rows}) AS batch (ordinal, type, data)) "
    "SELECT position FROM conversation"
)


def start_in_locked_conversation(
    scope: Scope, pk: uuid.UUID, *, row_epoch: int | None, epoch: int, agent: str, message: Any,
    message_id: uuid.UUID, run_id: uuid.UUID, replica: str, events: Sequence[dict[str, Any]], now: datetime,
) -> bool:
    """A turn's writes once locks 1 and 2 are held, in one statement: claim, counters, message, run, events.

    The supervision row is inserted (``row_epoch`` None: there was none) or
    moved from ``row_epoch`` to ``epoch``; the conversation takes ``epoch``,
    the user ``message`` at its next position and ``len(events)`` more events
    (typed dicts, the last a ``status_running``, so the stop reason clears).
    False, with nothing written, when the claim matched no row: only a writer
    that ignores the lock order gets there.
    """
    running = SupervisionStatus.RUNNING.value
    if row_epoch is None:
        claim, params = CLAIM_NEW_ROW, [pk, running, now, message_id, run_id, epoch, replica, now]
    else:
        claim, params = CLAIM_ROW, [running, now, message_id, run_id, epoch, replica, now, pk, row_epoch]
    fields = message.fields
    values = [json_param(fields[name]) if name in JSON_MESSAGE_FIELDS else fields[name] for name in MESSAGE_FIELDS]
    params += [epoch, LastTurnStatus.RUNNING.value, now, len(events), pk, scope.tenant, scope.user, len(events)]
    params += [message.id, pk, *values, now, now]
    params += [run_id, pk, message_id, agent, RunStatus.RUNNING.value, now, epoch]
    params += [pk, run_id, now]
    for ordinal, event in enumerate(events, start=1):
        params += [ordinal, event["type"], json_param(event["data"])]
    sql = START_IN_LOCKED_CONVERSATION.format(claim=claim, rows=", ".join(["(%s, %s, %s)"] * len(events)))
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone() is not None


# -- the turn as a follower reads it --------------------------------------------------------------

RECORDING = StreamRecording._meta.db_table

READ_TURN = (
    "SELECT c.tenant, c.owner, c.shared, c.epoch, "
    "s.status, s.heartbeat_at, s.message_id, s.run_id, s.epoch, s.replica, s.claimed_at, "
    'r.epoch, r."index", r.message, m.id, m.content, m.tool_calls, m.metadata '
    f"FROM {CONVERSATION} c LEFT JOIN {SUPERVISION} s ON s.conversation_id = c.id "
    f"LEFT JOIN {RECORDING} r ON r.conversation_id = c.id AND r.message_id = s.message_id "
    f"LEFT JOIN {MESSAGE} m ON m.conversation_id = c.id AND m.id = s.message_id AND s.status IN (%s, %s) "
    "WHERE c.id = %s"
)


@dataclass(frozen=True)
class TurnRows:
    """What :meth:`TurnStore.read_turn` reads, fetched in one statement: the rows the view is made of."""

    conversation: Conversation | None  # None: no such conversation (then every other row is None too)
    supervision: TurnSupervision | None
    record: dict[str, Any] | None
    answer: Message | None


def read_turn_rows(pk: uuid.UUID) -> TurnRows | None:
    """The conversation (access fields and epoch), its supervision row, the recording of that row's
    message and, for a done or errored turn, its stored answer; None when the conversation does not exist."""
    with connection.cursor() as cursor:
        cursor.execute(READ_TURN, [SupervisionStatus.DONE.value, SupervisionStatus.ERRORED.value, pk])
        found = cursor.fetchone()
    if found is None:
        return None
    tenant, owner, shared, epoch, status, heartbeat_at, message_id, run_id, row_epoch, replica, claimed_at = found[:11]
    record_epoch, record_index, record_message, answer_id, content, tool_calls, metadata = found[11:]
    conversation = Conversation(id=pk, tenant=tenant, owner=owner, shared=shared, epoch=epoch)
    supervision = None
    if status is not None:
        supervision = TurnSupervision(conversation_id=pk, status=status, heartbeat_at=heartbeat_at, message_id=message_id,
                                      run_id=run_id, epoch=row_epoch, replica=replica, claimed_at=claimed_at)
    record = None
    if record_index is not None:
        record = {"epoch": record_epoch, "index": record_index, "message": json_value(StreamRecording, "message", record_message)}
    answer = None
    if answer_id is not None:
        answer = Message(id=answer_id, conversation_id=pk, content=json_value(Message, "content", content),
                         tool_calls=json_value(Message, "tool_calls", tool_calls),
                         metadata=json_value(Message, "metadata", metadata))
    return TurnRows(conversation, supervision, record, answer)


def json_value(model: Any, field_name: str, value: Any) -> Any:
    """A JSON column's value as the ORM would load it."""
    return model._meta.get_field(field_name).from_db_value(value, None, connection)
