"""Agent state checkpoints: the working state a resumed turn is revived from.

One blob per conversation, ``{state_key: blob}``, replaced whole by each save
(every ``CHECKPOINT_INTERVAL`` seconds during a turn and once at its end).
Saves are fenced by the producer's epoch; a state whose JSON is larger than
``MAX_STATE_BYTES`` is StorageLimit and nothing is written.
"""

from __future__ import annotations

import contextlib
import functools
import json
import uuid
import weakref
from typing import Any

from django.db import DEFAULT_DB_ALIAS, IntegrityError, ProgrammingError, connection, connections, transaction
from django.utils import timezone

from ..exceptions import Fenced
from ..models import AgentCheckpoint, TurnSupervision
from ..scope import Scope
from ..statuses import SupervisionStatus
from .base import Utf8Text, execute_bound, lookup_id, parse_id, readable_conversation
from .fencing import clean_lease_epoch, fence, fence_many, limit_lock_wait, lock_wait_milliseconds, upsert_unless_newer
from .protocols import CheckpointStoreProtocol
from .rules.checkpoints import (  # re-exported: these rules moved to agent_persistence/stores/rules/checkpoints.py
    ORJSON_OPTIONS as ORJSON_OPTIONS,
    clean_state as clean_state,
    _encode_other as _encode_other,
)
from .rules.checkpoints import (
    encode_state,
    encode_state_utf8,
)
from .twins import twins_of

#: The save function of migration 0011 (as 0013 replaced it) and its call (the casts pick the signature whatever psycopg binds).
SAVE_FUNCTION = "agent_persistence_save_checkpoint"
#: SQLSTATE undefined_function: the database lacks the save function (or has another signature of it).
UNDEFINED_FUNCTION = "42883"
_CALL_SQL = f"SELECT {SAVE_FUNCTION}(%s::text, %s::uuid, %s::bigint, %s::text, %s::bigint, %s::uuid, %s::timestamptz)"

#: psycopg connections whose database lacks the save function (built without migrations): they use the statement.
_WITHOUT_FUNCTION: weakref.WeakSet[Any] = weakref.WeakSet()


def _save_on_postgresql(db: Any, pk: uuid.UUID, encoded: bytes, values: dict[str, Any]) -> bool:
    """PostgreSQL: the fence and the upsert in one round trip on ``db`` (the default connection); whether it wrote.

    The function of migration 0011 (``agent_persistence_save_checkpoint``,
    as migration 0013 replaced it) runs both, with plans PL/pgSQL keeps for the session, so only a trivial
    ``SELECT`` is planned per call. Where the database lacks it, the same work
    as one statement (:func:`_save_in_one_statement`), planned every time.
    Inside a caller's transaction either one is a savepoint of it, so a
    failure leaves the caller's transaction usable.
    """
    atomic = transaction.atomic if db.in_atomic_block else contextlib.nullcontext
    db.ensure_connection()
    raw = db.connection
    if raw not in _WITHOUT_FUNCTION:
        params = [str(lock_wait_milliseconds()), pk, values["epoch"], Utf8Text(encoded), values["size"],
                  values["message_id"], values["saved_at"]]
        try:
            with atomic():
                return bool(execute_bound(_CALL_SQL, params, db=db)[0][0])
        except ProgrammingError as error:
            if getattr(error.__cause__, "sqlstate", None) != UNDEFINED_FUNCTION:
                raise
            _WITHOUT_FUNCTION.add(raw)
    with atomic():
        return _save_in_one_statement(pk, encoded, values)


def _save_in_one_statement(pk: uuid.UUID, encoded: bytes, values: dict[str, Any]) -> bool:
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
    UTF-8 orjson wrote (:class:`.base.Utf8Text`), never decoded to ``str`` and
    encoded again.
    """
    # PostgreSQL's adapters take these values as they are (what Django's get_db_prep_value gives there).
    params = [str(lock_wait_milliseconds()), values["saved_at"], pk, values["epoch"], SupervisionStatus.RUNNING.value,
              pk, Utf8Text(encoded), values["size"], values["message_id"], values["epoch"], values["saved_at"]]
    return bool(execute_bound(_save_sql(), params))  # the state is bound, not inlined


@functools.cache
def _save_sql() -> str:
    """The statement of :func:`_save_in_one_statement` (built once: it depends only on the models)."""
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


class CheckpointStore(twins_of(CheckpointStoreProtocol)):
    """The agent checkpoint of each conversation."""

    def load(self, conversation_id: Any) -> dict[str, Any]:
        """The saved state, for the runtime; ``{}`` when none was saved."""
        quote = connection.ops.quote_name
        meta = AgentCheckpoint._meta
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT {quote(meta.get_field('state').column)} FROM {quote(meta.db_table)} "
                f"WHERE {quote(meta.get_field('conversation').column)} = %s",
                [meta.pk.get_db_prep_value(lookup_id(conversation_id), connection)],
            )
            row = cursor.fetchone()
        return json.loads(row[0]) if row is not None else {}

    def load_for(self, scope: Scope, conversation_id: Any) -> dict[str, Any]:
        """The saved state if ``scope`` may read the conversation (NotFound otherwise)."""
        return self.load(readable_conversation(scope, conversation_id).pk)

    def save(self, conversation_id: Any, state: dict[str, Any], *, epoch: int, message_id: Any = None) -> None:
        """Replace the conversation's state, fenced by ``epoch``.

        Fenced (and nothing written) when ``epoch`` no longer holds a running
        turn of the conversation or a newer epoch's checkpoint is stored. The
        state is encoded once and stored as its JSON text; on PostgreSQL the
        fence and the write are one call of the save function (migration 0011).
        """
        pk = lookup_id(conversation_id)
        encoded = encode_state_utf8(state)
        values = {
            "size": len(encoded),
            "message_id": None if message_id is None else parse_id(message_id, "message_id"),
            "epoch": clean_lease_epoch(epoch),
            "saved_at": timezone.now(),
        }
        db = connections[DEFAULT_DB_ALIAS]  # once: each attribute of the proxy ``connection`` looks it up again
        if db.vendor == "postgresql":
            if not _save_on_postgresql(db, pk, encoded, values):
                raise Fenced(conversation_id=str(pk), epoch=epoch)
            return
        values["state"] = encoded.decode()
        with transaction.atomic():
            fence(pk, epoch)
            if AgentCheckpoint.objects.filter(pk=pk, epoch__lte=epoch).update(**values):
                return
            try:
                with transaction.atomic():
                    AgentCheckpoint.objects.create(conversation_id=pk, **values)
            except IntegrityError:
                # The row exists, so the UPDATE missed it: a newer epoch saved it.
                raise Fenced(conversation_id=str(pk), epoch=epoch) from None

    def save_many(self, checkpoints: list[dict[str, Any]]) -> set[uuid.UUID]:
        """Save a process's due checkpoints in one transaction; return the conversation ids NOT saved.

        Each item has ``conversation_id``, ``state``, ``epoch`` and optionally
        ``message_id``. A fenced one, or one older than the stored checkpoint,
        is reported instead of raised; an invalid or oversized state is
        Validation / StorageLimit and nothing is written.
        """
        now = timezone.now()
        rows: dict[uuid.UUID, dict[str, Any]] = {}
        for item in checkpoints:
            pk = lookup_id(item["conversation_id"])
            state, size = encode_state(item["state"])
            message_id = item.get("message_id")
            rows[pk] = {
                "conversation": pk,
                "state": state,
                "size": size,
                "message_id": None if message_id is None else parse_id(message_id, "message_id"),
                "epoch": clean_lease_epoch(item["epoch"]),
                "saved_at": now,
            }
        if not rows:
            return set()
        with transaction.atomic():
            limit_lock_wait()
            fenced = fence_many([(pk, row["epoch"]) for pk, row in rows.items()], now=now)
            allowed = [row for pk, row in rows.items() if pk not in fenced]
            written = upsert_unless_newer(AgentCheckpoint, allowed) if allowed else set()
        return set(rows) - written

    def delete(self, conversation_id: Any) -> None:
        """Forget the conversation's state; nothing happens when there is none."""
        AgentCheckpoint.objects.filter(pk=lookup_id(conversation_id)).delete()

    def read(self, conversation_id: Any) -> AgentCheckpoint | None:
        """The stored checkpoint (state, size, message_id, epoch, saved_at), unscoped; None when none was saved."""
        return AgentCheckpoint.objects.filter(pk=lookup_id(conversation_id)).first()
