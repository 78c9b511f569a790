"""Server-side binding on PostgreSQL: a statement's parameters sent apart from its text, on Django's connection.

What :func:`~agent_persistence.stores.dialects.execute_bound` runs on
PostgreSQL: a psycopg cursor on Django's connection, so a large parameter (a
checkpoint's state, a recording) is never inlined as a quoted literal.
A :class:`~agent_persistence.stores.dialects.Utf8Text` goes as the bytes it holds.
"""

from __future__ import annotations

import functools
import weakref
from typing import Any, Sequence

from ..dialects import Utf8Text


@functools.cache
def _utf8_text_dumper() -> type:
    """psycopg's dumper of :class:`Utf8Text` (made on first use: psycopg is imported only on PostgreSQL)."""
    from psycopg.adapt import Dumper
    from psycopg.postgres import types
    from psycopg.pq import Format

    class Utf8TextDumper(Dumper):
        format = Format.TEXT
        oid = types["text"].oid

        def dump(self, obj: Utf8Text) -> bytes:
            return obj.data

    return Utf8TextDumper


def execute_bound_on_postgresql(db: Any, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
    """Run ``sql`` on ``db`` through a psycopg cursor binding server-side, its errors raised as Django's; the rows it returns.

    The cursor is on Django's connection, so in its transaction and under its
    ``prepare_threshold`` (Django's default prepares nothing by name, which
    transaction-mode poolers need). A statement that returns no rows (no
    ``RETURNING``) gives ``[]``.
    """
    import psycopg

    db.ensure_connection()
    raw = db.connection
    if raw not in _BINDING_UTF8_TEXT:
        # Once per connection: a dumper registered on each cursor would copy the adapters and lose their caches.
        raw.adapters.register_dumper(Utf8Text, _utf8_text_dumper())
        _BINDING_UTF8_TEXT.add(raw)
    with db.wrap_database_errors, psycopg.Cursor(raw) as cursor:
        cursor.execute(sql, params)
        result = cursor.pgresult
        return cursor.fetchall() if result is not None and result.nfields else []  # cheaper than ``description``


#: psycopg connections whose adapters dump :class:`Utf8Text` (Django's, each a private copy of psycopg's defaults).
_BINDING_UTF8_TEXT: weakref.WeakSet[Any] = weakref.WeakSet()
