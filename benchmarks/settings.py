"""Django settings of the benchmarks: the example project, pointed at the benchmark's own database.

The database is ``DATABASE_URL`` (default: the local PostgreSQL) with its name
replaced by :data:`benchmarks.database.BENCH_DATABASE_ENV` (set by the
command before Django starts), so a benchmark never writes to the database
the URL names.
"""

from __future__ import annotations

import os

import dj_database_url

from example_project.settings import *  # noqa: F401,F403 - the example project is the host app

from example_project.settings import POSTGRES_POOL

from .database import BENCH_DATABASE_ENV, server_url

# DEBUG would make Django keep every query in memory and slow the ORM down.
DEBUG = False

DATABASES = {"default": dj_database_url.parse(server_url(), conn_max_age=0)}
DATABASES["default"]["NAME"] = os.environ[BENCH_DATABASE_ENV]
# As the example project on PostgreSQL: Django's psycopg pool, so a thread's "connect" is a
# checkout, not a new server backend (AP_BENCH_NO_POOL=1 measures without it).
if not os.environ.get("AP_BENCH_NO_POOL"):
    DATABASES["default"]["OPTIONS"] = {"pool": POSTGRES_POOL}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"agent_persistence": {"handlers": ["console"], "level": "WARNING"}},
}

# The example project's URLs and, under baseline/, the plain Django views the API is measured against.
ROOT_URLCONF = "benchmarks.urls"
