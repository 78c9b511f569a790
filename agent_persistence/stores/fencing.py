"""Fencing: the ORM family's proof that a producer's epoch still holds its conversation.

Every producer write of the ORM stores (recordings, checkpoints, runs,
interrupts, events, the turn store's seal) runs :func:`fence` (or
:func:`fence_many` for a batch) first, in its own transaction: the UPDATE of
the supervision row at the producer's epoch fails once a newer epoch holds the
conversation, and keeps that row locked until the write commits, so a claim
cannot slip in between. This is lock 1 of the order that
:mod:`agent_persistence.stores.turns` writes down.

The fence is shared by the ORM stores, not reached through another store's
accessor: the fenced stores (turns, supervision, runs, interrupts, recordings,
checkpoints, events) are one family and are swapped together (the system
check ``agent_persistence.E011`` refuses a mix of families).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Iterable

from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction
from django.utils import timezone

from ..conf import app_settings
from ..exceptions import Conflict, Fenced, NotFound
from ..models import Conversation, SupervisionStatus, TurnSupervision
from ..scope import Scope
from .base import clean_datetime, execute_bound, lookup_id, writable_conversation
from .dialects import dialect_for
from .rules.fencing import (
    clean_entries,
    clean_lease_epoch,
)

RUNNING = SupervisionStatus.RUNNING.value

#: Conversations per statement of a batched heartbeat or upsert (keeps the statement's parameters bounded).
BATCH_CHUNK_SIZE = 500


# -- fencing ----------------------------------------------------------------------------------


def fence(conversation_id: Any, epoch: int) -> None:
    """Prove that ``epoch`` still holds the conversation; raise Fenced when it does not.

    Call it INSIDE the caller's ``transaction.atomic()``, before the producer's
    write: the UPDATE keeps the supervision row locked until the caller
    commits, so a concurrent claim waits for the write instead of slipping in
    between the check and the write. It also stamps the heartbeat, since a
    producer that can write is alive.
    """
    pk = lookup_id(conversation_id)
    held = TurnSupervision.objects.filter(
        conversation_id=pk, epoch=clean_lease_epoch(epoch, minimum=0), status=SupervisionStatus.RUNNING
    ).update(heartbeat_at=timezone.now())
    if not held:
        raise Fenced(conversation_id=str(pk), epoch=epoch)


def lock_supervision(conversation_id: Any) -> TurnSupervision | None:
    """Lock the conversation's supervision row (if any) until the surrounding transaction ends.

    The first statement of a transaction that will lock the conversation row
    and then claim, so it takes the locks in the order producers do.
    """
    return TurnSupervision.objects.select_for_update().filter(pk=lookup_id(conversation_id)).first()


def fence_many(
    entries: Iterable[tuple[Any, int]], *, now: datetime | None = None, skip_locked: bool = False
) -> set[uuid.UUID]:
    """Stamp the heartbeat of every running ``(conversation_id, epoch)``; return the fenced ids.

    One ``UPDATE ... RETURNING`` per :data:`BATCH_CHUNK_SIZE` pairs. Inside a
    transaction the stamped rows stay locked until it commits, as with
    :func:`fence`. A conversation is fenced when none of its pairs matched a
    running row.

    With ``skip_locked`` (PostgreSQL; SQLite has no row locks to wait on) a
    row another transaction holds is skipped instead of waited for, and is
    neither stamped nor fenced: one locked conversation never stalls the
    heartbeats of every other turn of the process.
    """
    pairs = clean_entries(entries)
    now = clean_now(now)
    skip_locked = skip_locked and connection.features.has_select_for_update_skip_locked
    fenced: set[uuid.UUID] = set()
    for start in range(0, len(pairs), BATCH_CHUNK_SIZE):
        chunk = pairs[start : start + BATCH_CHUNK_SIZE]
        stamped = _stamp_heartbeats(chunk, now, skip_locked=skip_locked)
        missed = {cid for cid, _ in chunk} - stamped
        if missed and skip_locked:
            # A skipped row may be one that is merely locked: only a row no longer running at the epoch is fenced.
            missed -= _still_running([pair for pair in chunk if pair[0] in missed])
        fenced |= missed
    return fenced


def _pairs_sql(pairs: list[tuple[uuid.UUID, int]]) -> tuple[str, list[Any]]:
    meta = TurnSupervision._meta
    conversation_field = meta.get_field("conversation")
    quote = connection.ops.quote_name
    id_column, epoch_column = quote(conversation_field.column), quote(meta.get_field("epoch").column)
    sql = (
        f"{quote(meta.get_field('status').column)} = %s "
        f"AND ({id_column}, {epoch_column}) IN (VALUES {', '.join(['(%s, %s)'] * len(pairs))})"
    )
    params: list[Any] = [RUNNING]
    for cid, epoch in pairs:
        params += [conversation_field.target_field.get_db_prep_value(cid, connection), epoch]
    return sql, params


def _still_running(pairs: list[tuple[uuid.UUID, int]]) -> set[uuid.UUID]:
    meta = TurnSupervision._meta
    quote = connection.ops.quote_name
    id_column = quote(meta.get_field("conversation").column)
    where, params = _pairs_sql(pairs)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {id_column} FROM {quote(meta.db_table)} WHERE {where}", params)
        return {as_uuid(value) for (value,) in cursor.fetchall()}


def _stamp_heartbeats(pairs: list[tuple[uuid.UUID, int]], now: datetime, *, skip_locked: bool = False) -> set[uuid.UUID]:
    if skip_locked:
        meta = TurnSupervision._meta
        quote = connection.ops.quote_name
        table, id_column = quote(meta.db_table), quote(meta.get_field("conversation").column)
        where, params = _pairs_sql(pairs)
        sql = (
            f"UPDATE {table} SET {quote(meta.get_field('heartbeat_at').column)} = %s WHERE {id_column} IN "
            f"(SELECT {id_column} FROM {table} WHERE {where} FOR UPDATE SKIP LOCKED) RETURNING {id_column}"
        )
        with connection.cursor() as cursor:
            cursor.execute(sql, [meta.get_field("heartbeat_at").get_db_prep_value(now, connection), *params])
            return {as_uuid(value) for (value,) in cursor.fetchall()}
    return _stamp_heartbeats_waiting(pairs, now)


def limit_lock_wait() -> None:
    """Inside a producer's transaction: wait at most ``PRODUCER_LOCK_TIMEOUT`` for a row lock (PostgreSQL).

    A statement that would wait longer fails (and is retried by the producer)
    instead of holding the process's producer database thread behind a lock
    someone else keeps.
    """
    db = connections[DEFAULT_DB_ALIAS]  # once: each attribute of the proxy ``connection`` looks it up again
    dialect_for(db).limit_lock_wait(db)


def lock_wait_milliseconds() -> int:
    """``PRODUCER_LOCK_TIMEOUT`` in whole milliseconds (at least 1: 0 would mean no bound)."""
    return max(1, int(app_settings.PRODUCER_LOCK_TIMEOUT * 1000))


def _stamp_heartbeats_waiting(pairs: list[tuple[uuid.UUID, int]], now: datetime) -> set[uuid.UUID]:
    meta = TurnSupervision._meta
    conversation_field = meta.get_field("conversation")
    quote = connection.ops.quote_name
    id_column, epoch_column = quote(conversation_field.column), quote(meta.get_field("epoch").column)
    rows = ", ".join(["(%s, %s)"] * len(pairs))
    sql = (
        f"UPDATE {quote(meta.db_table)} SET {quote(meta.get_field('heartbeat_at').column)} = %s "
        f"WHERE {quote(meta.get_field('status').column)} = %s "
        f"AND ({id_column}, {epoch_column}) IN (VALUES {rows}) "
        f"RETURNING {id_column}"
    )
    params: list[Any] = [meta.get_field("heartbeat_at").get_db_prep_value(now, connection), RUNNING]
    for cid, epoch in pairs:
        params += [conversation_field.target_field.get_db_prep_value(cid, connection), epoch]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return {as_uuid(value) for (value,) in cursor.fetchall()}


def as_uuid(value: Any) -> uuid.UUID:
    # SQLite hands back the 32-character hex text a UUIDField is stored as.
    return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))


def clean_now(value: Any) -> datetime:
    return clean_datetime(value, "now") or timezone.now()


def guard(conversation_id: uuid.UUID, epoch: int | None) -> None:
    """Fence a producer write (``epoch`` given); operator and API actions pass None."""
    if epoch is not None:
        fence(conversation_id, epoch)


def producer_conversation(scope: Scope, conversation_id: Any, epoch: int | None) -> Conversation:
    """The owner's conversation, fenced at ``epoch`` and then locked until the transaction ends.

    The lock keeps the conversation from being deleted before an insert that
    refers to it commits; it is taken after the fence, in the declared lock order.
    """
    conversation = writable_conversation(scope, conversation_id)
    guard(conversation.pk, epoch)
    locked = Conversation.objects.select_for_update().filter(pk=conversation.pk).first()
    if locked is None:  # deleted between the two reads
        raise NotFound("No such conversation.")
    return locked


def upsert_unless_newer(model: Any, rows: list[dict[str, Any]]) -> set[uuid.UUID]:
    """Write one row per conversation unless the stored row has a higher ``epoch``; return the ids written.

    ``INSERT ... ON CONFLICT (pk) DO UPDATE ... WHERE epoch <= new epoch
    RETURNING pk`` in chunks of :data:`BATCH_CHUNK_SIZE`: the check and the
    write are one statement, atomic on PostgreSQL and SQLite alike. ``rows``
    map field names (the primary key named ``conversation``) to values.
    """
    written: set[uuid.UUID] = set()
    for start in range(0, len(rows), BATCH_CHUNK_SIZE):
        written |= _upsert_chunk(model, rows[start : start + BATCH_CHUNK_SIZE])
    return written


def _upsert_chunk(model: Any, rows: list[dict[str, Any]]) -> set[uuid.UUID]:
    meta = model._meta
    quote = connection.ops.quote_name
    names = list(rows[0])
    fields = [meta.get_field(name) for name in names]
    columns = [quote(field.column) for field in fields]
    table = quote(meta.db_table)
    id_column = quote(meta.pk.column)
    epoch_column = quote(meta.get_field("epoch").column)
    placeholders = "(" + ", ".join(["%s"] * len(fields)) + ")"
    sql = (
        f"INSERT INTO {table} ({', '.join(columns)}) VALUES {', '.join([placeholders] * len(rows))} "
        f"ON CONFLICT ({id_column}) DO UPDATE SET "
        + ", ".join(f"{column} = excluded.{column}" for column in columns if column != id_column)
        + f" WHERE {table}.{epoch_column} <= excluded.{epoch_column} RETURNING {id_column}"
    )
    preparers = [getattr(field, "target_field", None) or field for field in fields]
    params = [preparer.get_db_prep_value(row[name], connection) for row in rows for name, preparer in zip(names, preparers)]
    return {as_uuid(value) for (value,) in execute_bound(sql, params)}  # states and recordings are bound, not inlined


# -- locks 1 and 2 of the turn's lock order (see stores.turns) ------------------------------------

#: How often a transition starts its locking again when rows appear or vanish under it.
LOCK_ATTEMPTS = 8


class _RowAppeared(Exception):
    """Rolls back the conversation's lock: a supervision row appeared before it was held."""


def lock_turn(pk: uuid.UUID) -> tuple[TurnSupervision | None, Conversation | None]:
    """Take locks 1 and 2 of the lock order; the conversation is None when it does not exist."""
    for _ in range(LOCK_ATTEMPTS):
        row = TurnSupervision.objects.select_for_update().filter(pk=pk).first()
        if row is not None:
            conversation = Conversation.objects.select_for_update().filter(pk=pk).first()
            if conversation is not None:
                return row, conversation
            continue  # the conversation (and its row, by cascade) was deleted meanwhile
        try:
            with transaction.atomic():
                conversation = Conversation.objects.select_for_update().filter(pk=pk).first()
                if conversation is not None and TurnSupervision.objects.filter(pk=pk).exists():
                    raise _RowAppeared()
                return None, conversation
        except _RowAppeared:
            continue
    raise contended()


def contended() -> Conflict:
    return Conflict("The conversation's turn changed while it was being claimed; try again.", code="claim_conflict")
