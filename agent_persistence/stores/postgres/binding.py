"""Server-side binding: a statement's parameters sent apart from its text (PostgreSQL), on Django's connection.

:func:`execute_bound` runs a statement whose parameters may be large (a
checkpoint's state, a recording): on PostgreSQL through a psycopg cursor that
binds server-side, elsewhere through Django's cursor. :class:`Utf8Text` is a
parameter already encoded as UTF-8, sent as it is.
"""

from __future__ import annotations

import functools
import weakref
from dataclasses import dataclass
from typing import Any, Sequence

from django.db import DEFAULT_DB_ALIAS, connections


@dataclass(frozen=True, slots=True)
class Utf8Text:
    """A parameter of :func:`execute_bound`: text already encoded as UTF-8 (``data``), bound as ``text``.

    On PostgreSQL the bytes are sent as they are (the server checks they are
    UTF-8), sparing a decode to ``str`` and psycopg's encode back, which cost
    milliseconds per megabyte of non-ASCII text. Elsewhere the text is decoded.
    """

    data: bytes


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
        db = connections[DEFAULT_DB_ALIAS]  # the proxy ``connection`` looks the wrapper up again on every attribute
    if db.vendor != "postgresql":
        params = [param.data.decode() if isinstance(param, Utf8Text) else param for param in params]
        with db.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchall() if cursor.description else []
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
