"""One dialect object per database: the operations of the ORM stores whose SQL differs by database.

As Django's ``connection.ops`` / ``connection.features`` keep a backend's
differences out of the ORM, :func:`dialect_for` gives the stores the
:class:`Dialect` of a connection, and a store method calls it instead of
testing the vendor. The general dialect (SQLite, and any database without a
wing of its own) does nothing itself: each one-statement operation returns
None, "not done here", and the store takes its general path in a
transaction. PostgreSQL's (:class:`~agent_persistence.stores.postgres.dialect.PostgresDialect`)
does the same work in one statement (data-modifying CTEs, the checkpoint save
function) and binds large parameters server-side.

A one-statement operation writes nothing when the general path must decide
(the scope does not own the conversation, the conversation does not exist
yet, the claim missed): the general path then answers, as it does on every
other database.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Sequence

from django.db import DEFAULT_DB_ALIAS, connections
from django.utils.module_loading import import_string

from ..scope import Scope

#: The dialect of each vendor that has one of its own; any other vendor gets :class:`Dialect`.
DIALECTS = {"postgresql": "agent_persistence.stores.postgres.dialect.PostgresDialect"}


@dataclass(frozen=True, slots=True)
class Utf8Text:
    """A parameter of :func:`execute_bound`: text already encoded as UTF-8 (``data``), bound as ``text``.

    On PostgreSQL the bytes are sent as they are (the server checks they are
    UTF-8), sparing a decode to ``str`` and psycopg's encode back, which cost
    milliseconds per megabyte of non-ASCII text. Elsewhere the text is decoded.
    """

    data: bytes


class Dialect:
    """The general dialect: Django's cursor, and no one-statement paths (each returns None: "not done here")."""

    def execute_bound(self, db: Any, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        """Run ``sql`` on ``db`` with its parameters (a :class:`Utf8Text` decoded); the rows it returns."""
        params = [param.data.decode() if isinstance(param, Utf8Text) else param for param in params]
        with db.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchall() if cursor.description else []

    def load_times_natively(self, db: Any, cursor: Any) -> None:
        """Let ``cursor`` read times with a faster loader that gives what Django's gives; here, nothing to do."""

    def limit_lock_wait(self, db: Any) -> None:
        """Bound the row lock waits of the transaction ``db`` is in by ``PRODUCER_LOCK_TIMEOUT``; here, none to bound."""

    def conversation_access(self, db: Any, ids: Sequence[Any]) -> list[tuple[Any, ...]] | None:
        """``(id, tenant, owner, shared)`` of the conversations among ``ids``, in one statement; None: not done here."""
        return None

    def append_message(self, scope: Scope, pk: Any, message: Any, now: datetime) -> Any:
        """The stored message, appended in one statement; None: nothing written, the general path decides."""
        return None

    def append_events(self, scope: Scope, pk: Any, batch: Sequence[Any], now: datetime, *, stop_reason: Any,
                      sets_stop_reason: bool) -> Any:
        """The stored events, numbered and appended in one statement; None: nothing written, the general path decides."""
        return None

    def start_in_new_conversation(self, scope: Scope, pk: Any, **start: Any) -> Any:
        """A turn's start in a conversation that does not exist yet, in one statement: the stored user message;
        None: nothing written, the general path decides."""
        return None

    def start_in_locked_conversation(self, scope: Scope, pk: Any, **start: Any) -> bool | None:
        """A turn's writes under locks 1 and 2 in one statement: whether the claim matched;
        None: nothing written, the store writes them one by one."""
        return None

    def read_turn_rows(self, pk: Any) -> Any:
        """The rows a turn view is made of, read in one statement; None: the store reads them one by one."""
        return None

    def save_checkpoint(self, db: Any, pk: Any, encoded: bytes, values: dict[str, Any]) -> bool | None:
        """The fenced checkpoint save in one round trip: whether it wrote; None: the general path saves."""
        return None


@functools.cache
def dialect_of_vendor(vendor: str) -> Dialect:
    """The one dialect object of ``vendor`` (made on first use: a wing's modules are imported only where it runs)."""
    path = DIALECTS.get(vendor)
    return Dialect() if path is None else import_string(path)()


def dialect_for(db: Any = None) -> Dialect:
    """The dialect of ``db`` (a connection wrapper; the default connection when None)."""
    if db is None:
        db = connections[DEFAULT_DB_ALIAS]  # the proxy ``connection`` looks the wrapper up again on every attribute
    return dialect_of_vendor(db.vendor)


def execute_bound(sql: str, params: Sequence[Any], *, db: Any = None) -> list[tuple[Any, ...]]:
    """Run ``sql`` on the default connection (``db``, its wrapper, when the caller has it) with its
    parameters sent apart from it; the rows it returns.

    PostgreSQL: a psycopg cursor binding server-side, on Django's connection (so
    in its transaction and under its ``prepare_threshold``: Django's default
    prepares nothing by name, which transaction-mode poolers need), its errors
    raised as Django's. Django's own cursor binds client-side: it would inline
    a state or a recording of up to ``MAX_STATE_BYTES`` as a quoted literal for
    the server to parse. Elsewhere, Django's cursor (a :class:`Utf8Text`
    decoded). A statement that returns no rows (no ``RETURNING``) gives ``[]``.
    """
    if db is None:
        db = connections[DEFAULT_DB_ALIAS]
    return dialect_of_vendor(db.vendor).execute_bound(db, sql, params)
