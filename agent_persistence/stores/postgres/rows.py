"""Row loaders of PostgreSQL: psycopg's compiled ``timestamptz`` loader where it gives what Django's gives.

Called by the PostgreSQL dialect only (:meth:`.dialect.PostgresDialect.load_times_natively`).
"""

from __future__ import annotations

import functools
from datetime import timezone as dt_timezone
from typing import Any


def load_times_natively(database: Any, cursor: Any) -> None:
    """Let ``cursor`` read ``timestamptz`` with psycopg's own loader where it gives what Django's gives.

    Django's loader (PostgreSQL, psycopg 3) is psycopg's pure-Python one
    followed by ``replace(tzinfo=database.timezone)``. When that time zone
    and the session's are both UTC (``USE_TZ`` without a database
    ``TIME_ZONE``, Django's default), psycopg's loader alone gives the same
    datetime with the same ``datetime.timezone.utc``, and its compiled one
    (psycopg's C extension, when installed) does it several times faster. Any
    other case keeps Django's loader; the change is this cursor's only.
    """
    if database.timezone is not dt_timezone.utc:
        return
    from django.db.backends.postgresql.psycopg_any import is_psycopg3

    if not is_psycopg3 or cursor.cursor.connection.info.timezone is not dt_timezone.utc:
        return
    oid, loader = native_timestamptz_loader()
    cursor.cursor.adapters.register_loader(oid, loader)


@functools.cache
def native_timestamptz_loader() -> tuple[int, type[Any]]:
    """psycopg's own text loader of ``timestamptz`` (its C one when compiled), and the type's oid."""
    import psycopg
    from psycopg import pq

    oid = psycopg.postgres.types["timestamptz"].oid
    return oid, psycopg.adapters.get_loader(oid, pq.Format.TEXT)
