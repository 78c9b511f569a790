"""The statements one call sends to PostgreSQL, read from libpq's protocol trace.

:func:`statements_of` runs a call with libpq tracing on a psycopg connection
(the raw side's, or the one under Django's connection) and returns the SQL of
every statement the client sent, in order: simple queries (``BEGIN``,
``COMMIT``, ``SAVEPOINT``, client-side bound statements) and parsed ones
(server-side bound). Each is one round trip, since the client waits for its
``ReadyForQuery`` before the next.
"""

from __future__ import annotations

import re
import tempfile
from typing import Any, Callable

import psycopg

_SENT = re.compile(r'^F\t\d+\t(?:Query\t "(?P<query>.*)"|Parse\t "[^"]*" "(?P<parsed>.*)" \d+)', re.DOTALL)
_PREPARED = re.compile(r'^F\t\d+\tBind\t "[^"]*" "(?P<name>[^"]+)"')
WIDTH = 320


def statements_of(pgconn: psycopg.pq.abc.PGconn, call: Callable[[], Any]) -> list[str]:
    """The statements ``call`` sends on ``pgconn``, one line each, whitespace folded."""
    with tempfile.TemporaryFile() as log:
        pgconn.trace(log.fileno())
        pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS | psycopg.pq.Trace.REGRESS_MODE)
        try:
            call()
        finally:
            pgconn.untrace()
        log.seek(0)
        # One protocol message per entry; a statement's text may span lines.
        lines = re.split(r"\n(?=[FB]\t\d+\t)", log.read().decode("utf-8", "replace"))
    sent: list[str] = []
    parsed = False  # a Bind right after its Parse is the same statement
    for line in lines:
        if match := _SENT.match(line):
            sent.append(fold(match.group("query") or match.group("parsed")))
            parsed = match.group("parsed") is not None
        elif prepared := _PREPARED.match(line):
            if not parsed:
                sent.append(f"(prepared statement {prepared.group('name')}, parsed earlier)")
            parsed = False
    return sent


def fold(sql: str) -> str:
    text = " ".join(sql.replace('\\"', '"').replace('"', "").split())
    return text if len(text) <= WIDTH else text[: WIDTH - 3] + "..."


def django_pgconn() -> Any:
    """The libpq connection under Django's default connection (opened if needed)."""
    from django.db import connection

    connection.ensure_connection()
    return connection.connection.pgconn


def format_statements(title: str, sides: dict[str, list[str]]) -> str:
    lines = [title]
    for side, statements in sides.items():
        lines.append(f"  {side}: {len(statements)} round trips")
        lines += [f"    {number}. {statement}" for number, statement in enumerate(statements, start=1)]
    return "\n".join(lines)
