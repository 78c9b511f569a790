"""The benchmark's own PostgreSQL database: its name, creating and dropping it, raw connections.

Only the databases named here (``agent_persistence_bench`` and
``agent_persistence_bench_quick``) are ever created, written or dropped; the
database ``DATABASE_URL`` names is used solely as the maintenance connection
that runs ``CREATE DATABASE`` / ``DROP DATABASE``.
"""

from __future__ import annotations

import os

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

DEFAULT_SERVER_URL = "postgres://postgres@127.0.0.1:5432/postgres"
#: The environment variable that tells ``benchmarks.settings`` (and spawned workers) which database to use.
BENCH_DATABASE_ENV = "AGENT_PERSISTENCE_BENCH_DATABASE"
FULL_DATABASE = "agent_persistence_bench"
QUICK_DATABASE = "agent_persistence_bench_quick"
BENCH_DATABASES = frozenset({FULL_DATABASE, QUICK_DATABASE})


def server_url() -> str:
    return os.environ.get("DATABASE_URL") or DEFAULT_SERVER_URL


def conninfo_for(database: str) -> str:
    return make_conninfo(server_url(), dbname=database)


def connect(database: str, *, autocommit: bool = False) -> psycopg.Connection:
    """A raw psycopg 3 connection to ``database`` on the server of ``DATABASE_URL``."""
    return psycopg.connect(conninfo_for(database), autocommit=autocommit)


def _check_ours(database: str) -> None:
    if database not in BENCH_DATABASES:
        raise ValueError(f"Refusing to touch {database!r}: benchmarks only use {sorted(BENCH_DATABASES)}.")


def _maintenance_connection() -> psycopg.Connection:
    return psycopg.connect(server_url(), autocommit=True)


def database_exists(database: str) -> bool:
    with _maintenance_connection() as connection:
        row = connection.execute("SELECT 1 FROM pg_database WHERE datname = %s", [database]).fetchone()
    return row is not None


def create_database(database: str) -> None:
    _check_ours(database)
    with _maintenance_connection() as connection:
        connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))


def drop_database(database: str) -> None:
    """Drop ``database`` if it exists, closing any session still connected to it."""
    _check_ours(database)
    with _maintenance_connection() as connection:
        connection.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database)))
