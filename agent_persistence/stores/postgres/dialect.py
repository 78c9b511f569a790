"""The PostgreSQL dialect: the one-statement paths of the stores, server-side binding, the native time loader."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Sequence

from ...scope import Scope
from ..dialects import Dialect
from ..fencing import lock_wait_milliseconds
from . import appends
from .binding import execute_bound_on_postgresql
from .checkpoints import save_on_postgresql
from .rows import load_times_natively

CONVERSATION_ACCESS = (
    "SELECT id, tenant, owner, shared FROM agent_persistence_conversation WHERE id = ANY(%s::uuid[])"
)


class PostgresDialect(Dialect):
    """What the stores do on PostgreSQL in one statement (data-modifying CTEs), each inside the caller's
    transaction as a savepoint of it, or committing alone outside one (:func:`.appends.unit`)."""

    def execute_bound(self, db: Any, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        return execute_bound_on_postgresql(db, sql, params)

    def load_times_natively(self, db: Any, cursor: Any) -> None:
        load_times_natively(db, cursor)

    def limit_lock_wait(self, db: Any) -> None:
        """``SET LOCAL lock_timeout`` inside a transaction (outside one there is nothing for it to last through)."""
        if db.in_atomic_block:
            with db.cursor() as cursor:
                cursor.execute(f"SET LOCAL lock_timeout = {lock_wait_milliseconds()}")

    def conversation_access(self, db: Any, ids: Sequence[Any]) -> list[tuple[Any, ...]] | None:
        """One statement whatever the number of ids: one ``uuid[]`` parameter bound server-side.

        The websocket access sweep asks for every conversation followed in the process each
        interval; Django's ``pk__in`` would render (and the client-side cursor quote) one
        parameter per id, which cost most of an idle server's CPU at 10,000 sockets.
        """
        return execute_bound_on_postgresql(db, CONVERSATION_ACCESS, [list(ids)])

    def append_message(self, scope: Scope, pk: Any, message: Any, now: datetime) -> Any:
        with appends.unit():
            return appends.append_message(scope, pk, message, now)

    def append_events(self, scope: Scope, pk: Any, batch: Sequence[Any], now: datetime, *, stop_reason: Any,
                      sets_stop_reason: bool) -> Any:
        with appends.unit():
            return appends.append_events(scope, pk, batch, now, stop_reason=stop_reason,
                                         sets_stop_reason=sets_stop_reason)

    def start_in_new_conversation(self, scope: Scope, pk: Any, **start: Any) -> Any:
        with appends.unit():
            return appends.start_in_new_conversation(scope, pk, **start)

    def start_in_locked_conversation(self, scope: Scope, pk: Any, **start: Any) -> bool | None:
        return appends.start_in_locked_conversation(scope, pk, **start)

    def read_turn_rows(self, pk: Any) -> Any:
        """:func:`.appends.read_turn_rows`, with empty rows (not None) when the conversation does not exist."""
        rows = appends.read_turn_rows(pk)
        return appends.TurnRows(None, None, None, None) if rows is None else rows

    def save_checkpoint(self, db: Any, pk: Any, encoded: bytes, values: dict[str, Any]) -> bool | None:
        return save_on_postgresql(db, pk, encoded, values)
