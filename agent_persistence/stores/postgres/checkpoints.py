"""The checkpoint save of PostgreSQL: the fence and the upsert in one round trip.

:func:`save_on_postgresql` calls the save function of migration 0011
(``agent_persistence_save_checkpoint``, as 0013 replaced it); where the
database lacks it, the same work runs as one statement
(:func:`save_in_one_statement`). The state is bound server-side, as the UTF-8
orjson wrote (:class:`.binding.Utf8Text`).
"""

from __future__ import annotations

import contextlib
import functools
import uuid
import weakref
from typing import Any

from django.db import ProgrammingError, connection, transaction

from ...models import AgentCheckpoint, TurnSupervision
from ...statuses import SupervisionStatus
from ..dialects import Utf8Text, execute_bound
from ..fencing import lock_wait_milliseconds


#: The save function of migration 0011 (as 0013 replaced it) and its call (the casts pick the signature whatever psycopg binds).
SAVE_FUNCTION = "agent_persistence_save_checkpoint"
#: SQLSTATE undefined_function: the database lacks the save function (or has another signature of it).
UNDEFINED_FUNCTION = "42883"
CALL_SQL = f"SELECT {SAVE_FUNCTION}(%s::text, %s::uuid, %s::bigint, %s::text, %s::bigint, %s::uuid, %s::timestamptz)"

#: psycopg connections whose database lacks the save function (built without migrations): they use the statement.
WITHOUT_FUNCTION: weakref.WeakSet[Any] = weakref.WeakSet()


def save_on_postgresql(db: Any, pk: uuid.UUID, encoded: bytes, values: dict[str, Any]) -> bool:
    """PostgreSQL: the fence and the upsert in one round trip on ``db`` (the default connection); whether it wrote.

    The function of migration 0011 (``agent_persistence_save_checkpoint``,
    as migration 0013 replaced it) runs both, with plans PL/pgSQL keeps for the session, so only a trivial
    ``SELECT`` is planned per call. Where the database lacks it, the same work
    as one statement (:func:`save_in_one_statement`), planned every time.
    Inside a caller's transaction either one is a savepoint of it, so a
    failure leaves the caller's transaction usable.
    """
    atomic = transaction.atomic if db.in_atomic_block else contextlib.nullcontext
    db.ensure_connection()
    raw = db.connection
    if raw not in WITHOUT_FUNCTION:
        params = [str(lock_wait_milliseconds()), pk, values["epoch"], Utf8Text(encoded), values["size"],
                  values["message_id"], values["saved_at"]]
        try:
            with atomic():
                return bool(execute_bound(CALL_SQL, params, db=db)[0][0])
        except ProgrammingError as error:
            if getattr(error.__cause__, "sqlstate", None) != UNDEFINED_FUNCTION:
                raise
            WITHOUT_FUNCTION.add(raw)
    with atomic():
        return save_in_one_statement(pk, encoded, values)


def save_in_one_statement(pk: uuid.UUID, encoded: bytes, values: dict[str, Any]) -> bool:
    """PostgreSQL without the save function: the fence and the upsert as one statement; whether it wrote.

    ``WITH bound AS (SELECT set_config('lock_timeout', ..., true)), fence AS
    (UPDATE supervision ... AND EXISTS (SELECT FROM bound) RETURNING) INSERT
    ... SELECT FROM fence ON CONFLICT DO UPDATE ... WHERE stored epoch <=
    epoch``: the UPDATE locks the supervision row (lock 1 of the order) and
    stamps the heartbeat, and nothing is written unless it matched a running
    row at ``epoch``. ``bound`` is ``SET LOCAL lock_timeout``
    (``PRODUCER_LOCK_TIMEOUT``) inside the statement: the fence's one-time
    filter runs it before any row is locked, so every lock wait of the
    statement is bounded without a round trip of its own, and it ends with the
    transaction (the statement's own, in autocommit). The state goes as the
    UTF-8 orjson wrote (:class:`.binding.Utf8Text`), never decoded to ``str`` and
    encoded again.
    """
    # PostgreSQL's adapters take these values as they are (what Django's get_db_prep_value gives there).
    params = [str(lock_wait_milliseconds()), values["saved_at"], pk, values["epoch"], SupervisionStatus.RUNNING.value,
              pk, Utf8Text(encoded), values["size"], values["message_id"], values["epoch"], values["saved_at"]]
    return bool(execute_bound(save_sql(), params))  # the state is bound, not inlined


@functools.cache
def save_sql() -> str:
    """The statement of :func:`save_in_one_statement` (built once: it depends only on the models)."""
    quote = connection.ops.quote_name
    checkpoint, supervision = AgentCheckpoint._meta, TurnSupervision._meta
    table, fence_table = quote(checkpoint.db_table), quote(supervision.db_table)
    columns = [quote(checkpoint.get_field(name).column) for name in ("state", "size", "message_id", "epoch", "saved_at")]
    id_column = quote(checkpoint.get_field("conversation").column)
    epoch_column = quote(checkpoint.get_field("epoch").column)
    return (
        # set_config(..., true) is SET LOCAL; the fence's one-time filter runs it before any row is locked.
        "WITH bound AS (SELECT set_config('lock_timeout', %s, true)), "
        f"fence AS (UPDATE {fence_table} SET {quote(supervision.get_field('heartbeat_at').column)} = %s "
        f"WHERE {quote(supervision.get_field('conversation').column)} = %s AND {quote(supervision.get_field('epoch').column)} = %s "
        f"AND {quote(supervision.get_field('status').column)} = %s AND EXISTS (SELECT FROM bound) RETURNING 1) "
        f"INSERT INTO {table} ({id_column}, {', '.join(columns)}) SELECT %s, {', '.join(['%s'] * len(columns))} FROM fence "
        f"ON CONFLICT ({id_column}) DO UPDATE SET "
        + ", ".join(f"{column} = excluded.{column}" for column in columns)
        + f" WHERE {table}.{epoch_column} <= excluded.{epoch_column} RETURNING {id_column}"
    )
