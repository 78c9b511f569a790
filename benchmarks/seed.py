"""Seeding the read benchmark's message table fast, with raw SQL, in Django's table layout.

One INSERT ... SELECT over ``generate_series`` writes every message row; the
store is not used, so seeding a million rows takes seconds, not hours. The rows
look like the store's own: UUIDv7-shaped ids in insertion order, gap-free
positions per conversation, ``next_position`` counters that match. The target
conversation's messages are interleaved with the others' (every
``interleave``-th row), as they would be on a busy server, so a page of them
is spread over many heap pages instead of sitting in a few.

A row in ``bench_seed`` written last records what was seeded; a database
without it (or seeded at another size) is seeded again from scratch.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

import psycopg

from .database import connect

#: Tenant and owner of the target conversation: the benchmark's Scope reads it.
BENCH_TENANT = "bench"
BENCH_USER = "bench-user"
MESSAGES_PER_OTHER_CONVERSATION = 1000


@dataclass(frozen=True)
class SeedPlan:
    """How many message rows to seed, and how many of them belong to the target conversation."""

    message_rows: int
    target_messages: int

    @property
    def interleave(self) -> int:
        return self.message_rows // self.target_messages

    @property
    def other_conversations(self) -> int:
        return (self.message_rows - self.target_messages) // MESSAGES_PER_OTHER_CONVERSATION

    def __post_init__(self) -> None:
        if self.message_rows % self.target_messages:
            raise ValueError("message_rows must be a multiple of target_messages.")
        if (self.message_rows - self.target_messages) % MESSAGES_PER_OTHER_CONVERSATION:
            raise ValueError(f"The other rows must fill conversations of {MESSAGES_PER_OTHER_CONVERSATION}.")


@dataclass(frozen=True)
class Seeded:
    """What ``bench_seed`` records about the seeded data."""

    target_conversation_id: uuid.UUID
    message_rows: int
    target_messages: int
    seconds: float


# A UUIDv7 layout (48-bit millisecond, version 7, variant 10) with md5 bits for the random part.
UUID7_FUNCTION = """
CREATE FUNCTION pg_temp.bench_uuid7(ms bigint, salt text) RETURNS uuid LANGUAGE sql IMMUTABLE AS $$
    SELECT (lpad(to_hex(ms), 12, '0') || '7' || substr(h, 1, 3) || '8' || substr(h, 4, 15))::uuid
    FROM (SELECT md5(salt || ':' || ms::text) AS h) AS random_bits
$$
"""

MARKER_TABLE = """
CREATE TABLE IF NOT EXISTS bench_seed (
    target_conversation_id uuid NOT NULL,
    message_rows bigint NOT NULL,
    target_messages bigint NOT NULL,
    seconds double precision NOT NULL,
    seeded_at timestamptz NOT NULL DEFAULT now()
)
"""

# Conversation 0 is the target; 1..n hold the other rows. Their ids are minted one
# millisecond apart, before the first message.
INSERT_CONVERSATIONS = """
INSERT INTO agent_persistence_conversation (
    id, tenant, owner, agent, title, metadata, state, version, last_turn_status, action_due_at,
    shared, pinned, epoch, next_position, last_event_seq, event_stop_reason, created_at, updated_at
)
SELECT
    pg_temp.bench_uuid7(%(base_ms)s - 10000 + k, 'conversation'),
    %(tenant)s,
    CASE WHEN k = 0 THEN %(owner)s ELSE 'seed-user-' || (k %% 50) END,
    'bench', 'Conversation ' || k, '{}', '{}', 0, NULL, NULL,
    false, false, 0,
    CASE WHEN k = 0 THEN %(target_messages)s ELSE %(per_other)s END,
    0, NULL,
    to_timestamp((%(base_ms)s - 10000 + k) / 1000.0),
    to_timestamp((%(base_ms)s + %(message_rows)s) / 1000.0)
FROM generate_series(0, %(other_conversations)s) AS k
"""

# Row g: every interleave-th row is the target's (position g / interleave); the j-th other
# row goes round-robin to the other conversations, so each fills positions 0..per_other-1.
INSERT_MESSAGES = """
INSERT INTO agent_persistence_message (
    id, conversation_id, position, role, content, name, tool_call_id, tool_calls, files,
    metadata, usage, run_id, created_at, updated_at
)
SELECT
    pg_temp.bench_uuid7(%(base_ms)s + g, 'message'),
    pg_temp.bench_uuid7(%(base_ms)s - 10000 + conversation_index, 'conversation'),
    position,
    CASE WHEN position %% 2 = 0 THEN 'user' ELSE 'assistant' END,
    to_jsonb('Message ' || g || ': ' || repeat(md5(g::text), 6)),
    NULL, NULL, NULL, NULL, '{}', NULL, NULL,
    to_timestamp((%(base_ms)s + g) / 1000.0),
    to_timestamp((%(base_ms)s + g) / 1000.0)
FROM (
    SELECT
        g,
        CASE WHEN g %% %(interleave)s = 0 THEN 0
             ELSE 1 + (g - g / %(interleave)s - 1) %% %(other_conversations)s END AS conversation_index,
        CASE WHEN g %% %(interleave)s = 0 THEN g / %(interleave)s
             ELSE (g - g / %(interleave)s - 1) / %(other_conversations)s END AS position
    FROM generate_series(0, %(message_rows)s - 1) AS g
) AS rows
"""


def read_seeded(connection: psycopg.Connection) -> Seeded | None:
    exists = connection.execute("SELECT to_regclass('bench_seed') IS NOT NULL").fetchone()
    if not exists or not exists[0]:
        return None
    row = connection.execute(
        "SELECT target_conversation_id, message_rows, target_messages, seconds FROM bench_seed"
    ).fetchone()
    return Seeded(*row) if row else None


def seeded_as_planned(database: str, plan: SeedPlan) -> Seeded | None:
    """What ``database`` holds when it was seeded with ``plan``; None otherwise."""
    with connect(database) as connection:
        seeded = read_seeded(connection)
    if seeded and (seeded.message_rows, seeded.target_messages) == (plan.message_rows, plan.target_messages):
        return seeded
    return None


def seed(database: str, plan: SeedPlan) -> Seeded:
    """Write the plan's conversations and messages into a freshly migrated ``database``."""
    started = time.perf_counter()
    base_ms = int(time.time() * 1000) - plan.message_rows - 60_000
    parameters = {
        "base_ms": base_ms,
        "tenant": BENCH_TENANT,
        "owner": BENCH_USER,
        "message_rows": plan.message_rows,
        "target_messages": plan.target_messages,
        "interleave": plan.interleave,
        "other_conversations": plan.other_conversations,
        "per_other": MESSAGES_PER_OTHER_CONVERSATION,
    }
    with connect(database) as connection:
        connection.execute(UUID7_FUNCTION)
        connection.execute(INSERT_CONVERSATIONS, parameters)
        connection.execute(INSERT_MESSAGES, parameters)
        target = connection.execute(
            "SELECT pg_temp.bench_uuid7(%s - 10000, 'conversation')", [base_ms]
        ).fetchone()[0]
        connection.commit()
    with connect(database, autocommit=True) as connection:
        # Fresh statistics and visibility map, as a server's autovacuum would have by now.
        connection.execute("VACUUM ANALYZE agent_persistence_conversation")
        connection.execute("VACUUM ANALYZE agent_persistence_message")
    seeded = Seeded(target, plan.message_rows, plan.target_messages, time.perf_counter() - started)
    with connect(database) as connection:
        connection.execute(MARKER_TABLE)
        connection.execute(
            "INSERT INTO bench_seed (target_conversation_id, message_rows, target_messages, seconds)"
            " VALUES (%s, %s, %s, %s)",
            [seeded.target_conversation_id, seeded.message_rows, seeded.target_messages, seeded.seconds],
        )
    return seeded
