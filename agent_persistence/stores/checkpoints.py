"""Agent state checkpoints: the working state a resumed turn is revived from.

One blob per conversation, ``{state_key: blob}``, replaced whole by each save
(every ``CHECKPOINT_INTERVAL`` seconds during a turn and once at its end).
Saves are fenced by the producer's epoch; a state whose JSON is larger than
``MAX_STATE_BYTES`` is StorageLimit and nothing is written.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from django.db import DEFAULT_DB_ALIAS, IntegrityError, connection, connections, transaction
from django.utils import timezone

from ..exceptions import Fenced
from ..models import AgentCheckpoint
from ..scope import Scope
from .base import lookup_id, parse_id, readable_conversation
from .dialects import dialect_for
from .fencing import clean_lease_epoch, fence, fence_many, limit_lock_wait, upsert_unless_newer
from .postgres import checkpoints as postgres_checkpoints
from .postgres.checkpoints import (  # re-exported: the save of PostgreSQL moved to agent_persistence/stores/postgres/checkpoints.py
    SAVE_FUNCTION as SAVE_FUNCTION,
    UNDEFINED_FUNCTION as UNDEFINED_FUNCTION,
)
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

# The names the tests and benchmarks reach through this module (one object each: the set is the one the save reads).
_CALL_SQL = postgres_checkpoints.CALL_SQL
_WITHOUT_FUNCTION = postgres_checkpoints.WITHOUT_FUNCTION
_save_sql = postgres_checkpoints.save_sql


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
        saved = dialect_for(db).save_checkpoint(db, pk, encoded, values)  # one round trip on PostgreSQL
        if saved is False:
            raise Fenced(conversation_id=str(pk), epoch=epoch)
        if saved:
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
