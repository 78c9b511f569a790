"""The raw psycopg 3 baselines: the same rows written and read with hand-written SQL.

Each function does the work of one store call with the fewest plain statements
that give the same result, on an autocommit connection (writes open their own
transaction), using psycopg's defaults (server-side binding, statements
prepared after a few executions).

The ``*_one_statement`` functions are the second baseline of each write: the
fewest round trips physically possible, one statement in autocommit (a CTE
that claims the position or sequence number under the row lock and inserts
with it), so one round trip and one commit per call. Nothing can do the same
work with less, so its ratio says how far a store call is from the limit.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from agent_persistence.ids import uuid7
from agent_persistence.scope import Scope

MESSAGE_COLUMNS = (
    "id, conversation_id, position, role, content, name, tool_call_id, tool_calls, files, "
    "metadata, usage, run_id, created_at, updated_at"
)
CONVERSATION_COLUMNS = (
    "id, tenant, owner, agent, title, metadata, state, version, last_turn_status, action_due_at, shared, "
    "pinned, epoch, next_position, last_event_seq, event_stop_reason, created_at, updated_at"
)

CLAIM_POSITION = """
UPDATE agent_persistence_conversation SET next_position = next_position + 1, updated_at = %s
WHERE id = %s AND tenant = %s AND owner = %s
RETURNING next_position - 1
"""
INSERT_MESSAGE = f"""
INSERT INTO agent_persistence_message ({MESSAGE_COLUMNS})
VALUES (%s, %s, %s, %s, %s, NULL, NULL, NULL, NULL, '{{}}', NULL, NULL, %s, %s)
"""
READABLE_CONVERSATION = f"""
SELECT {CONVERSATION_COLUMNS} FROM agent_persistence_conversation
WHERE id = %s AND tenant = %s AND (owner = %s OR shared)
"""
CURSOR_POSITION = "SELECT position FROM agent_persistence_message WHERE id = %s AND conversation_id = %s"
COUNT_AFTER = "SELECT count(*) FROM agent_persistence_message WHERE conversation_id = %s AND position > %s"
PAGE_AFTER = f"""
SELECT {MESSAGE_COLUMNS} FROM agent_persistence_message
WHERE conversation_id = %s AND position > %s ORDER BY position LIMIT %s
"""
# One statement: access check, cursor lookup and one row past the page (has_more, no total).
KEYSET_PAGE = f"""
SELECT {MESSAGE_COLUMNS} FROM agent_persistence_message
WHERE conversation_id = %(conversation)s
  AND position > (SELECT position FROM agent_persistence_message
                  WHERE id = %(cursor)s AND conversation_id = %(conversation)s)
  AND EXISTS (SELECT 1 FROM agent_persistence_conversation
              WHERE id = %(conversation)s AND tenant = %(tenant)s AND (owner = %(user)s OR shared))
ORDER BY position LIMIT %(limit)s
"""
CLAIM_SEQ = """
UPDATE agent_persistence_conversation SET last_event_seq = last_event_seq + 1
WHERE id = %s AND tenant = %s AND owner = %s
RETURNING last_event_seq
"""
INSERT_EVENT = """
INSERT INTO agent_persistence_event (conversation_id, seq, type, data, run_id, created_at)
VALUES (%s, %s, %s, %s, NULL, %s)
"""
# One statement each: claim under the conversation's row lock and insert, one round trip, one commit.
APPEND_MESSAGE_ONE_STATEMENT = f"""
WITH claimed AS (
    UPDATE agent_persistence_conversation SET next_position = next_position + 1, updated_at = %(at)s
    WHERE id = %(conversation)s AND tenant = %(tenant)s AND owner = %(user)s
    RETURNING next_position - 1 AS position
)
INSERT INTO agent_persistence_message ({MESSAGE_COLUMNS})
SELECT %(id)s, %(conversation)s, claimed.position, %(role)s, %(content)s, NULL, NULL, NULL, NULL, '{{}}', NULL, NULL,
       %(at)s, %(at)s
FROM claimed
RETURNING position
"""
APPEND_EVENT_ONE_STATEMENT = """
WITH claimed AS (
    UPDATE agent_persistence_conversation SET last_event_seq = last_event_seq + 1
    WHERE id = %(conversation)s AND tenant = %(tenant)s AND owner = %(user)s
    RETURNING last_event_seq AS seq
)
INSERT INTO agent_persistence_event (conversation_id, seq, type, data, run_id, created_at)
SELECT %(conversation)s, claimed.seq, %(type)s, %(data)s, NULL, %(at)s FROM claimed
RETURNING seq
"""


def now() -> datetime:
    return datetime.now(timezone.utc)


def append_message(
    connection: psycopg.Connection, scope: Scope, conversation_id: uuid.UUID, *, role: str, content: Any
) -> None:
    """Take the next position under the row lock and insert the message, in one transaction."""
    at = now()
    with connection.transaction():
        row = connection.execute(CLAIM_POSITION, [at, conversation_id, scope.tenant, scope.user]).fetchone()
        if row is None:
            raise LookupError("No such conversation.")
        connection.execute(INSERT_MESSAGE, [uuid7(), conversation_id, row[0], role, Jsonb(content), at, at])


def append_message_one_statement(
    connection: psycopg.Connection, scope: Scope, conversation_id: uuid.UUID, *, role: str, content: Any
) -> None:
    """The same append in one statement on an autocommit connection: one round trip, one commit."""
    at = now()
    row = connection.execute(APPEND_MESSAGE_ONE_STATEMENT, {
        "at": at, "conversation": conversation_id, "tenant": scope.tenant, "user": scope.user,
        "id": uuid7(), "role": role, "content": Jsonb(content),
    }).fetchone()
    if row is None:
        raise LookupError("No such conversation.")


def read_page_counted(
    connection: psycopg.Connection, scope: Scope, conversation_id: uuid.UUID, cursor_id: uuid.UUID, limit: int
) -> tuple[int, list[tuple[Any, ...]]]:
    """What list_messages(after=cursor) does: access check, cursor lookup, total, then the page."""
    if connection.execute(READABLE_CONVERSATION, [conversation_id, scope.tenant, scope.user]).fetchone() is None:
        raise LookupError("No such conversation.")
    cursor = connection.execute(CURSOR_POSITION, [cursor_id, conversation_id]).fetchone()
    if cursor is None:
        raise LookupError("No such message.")
    total = connection.execute(COUNT_AFTER, [conversation_id, cursor[0]]).fetchone()[0]
    return total, connection.execute(PAGE_AFTER, [conversation_id, cursor[0], limit]).fetchall()


def read_page_keyset(
    connection: psycopg.Connection, scope: Scope, conversation_id: uuid.UUID, cursor_id: uuid.UUID, limit: int
) -> list[tuple[Any, ...]]:
    """The least a cursor page needs: one statement, ``limit + 1`` rows for has_more, no total."""
    parameters = {
        "conversation": conversation_id,
        "cursor": cursor_id,
        "tenant": scope.tenant,
        "user": scope.user,
        "limit": limit + 1,
    }
    return connection.execute(KEYSET_PAGE, parameters).fetchall()


def append_event(
    connection: psycopg.Connection, scope: Scope, conversation_id: uuid.UUID, *, type: str, data: dict[str, Any]
) -> int:
    """Bump the conversation's event counter and insert the event under that number, in one transaction."""
    with connection.transaction():
        row = connection.execute(CLAIM_SEQ, [conversation_id, scope.tenant, scope.user]).fetchone()
        if row is None:
            raise LookupError("No such conversation.")
        connection.execute(INSERT_EVENT, [conversation_id, row[0], type, Jsonb(data), now()])
    return row[0]


def append_event_one_statement(
    connection: psycopg.Connection, scope: Scope, conversation_id: uuid.UUID, *, type: str, data: dict[str, Any]
) -> int:
    """The same event append in one statement on an autocommit connection: one round trip, one commit."""
    row = connection.execute(APPEND_EVENT_ONE_STATEMENT, {
        "conversation": conversation_id, "tenant": scope.tenant, "user": scope.user,
        "type": type, "data": Jsonb(data), "at": now(),
    }).fetchone()
    if row is None:
        raise LookupError("No such conversation.")
    return row[0]
