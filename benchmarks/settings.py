"""Django settings of the benchmarks: the example project, pointed at the benchmark's own database.

The database is ``DATABASE_URL`` (default: the local PostgreSQL) with its name
replaced by :data:`benchmarks.database.BENCH_DATABASE_ENV` (set by the
command before Django starts), so a benchmark never writes to the database
the URL names.
"""

from __future__ import annotations

import json
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

# `benchmarks deploy --runner tasks`: a worker tier, on django-tasks-db's db_worker (AP_BENCH_TASKS=db) or
# Celery through django-tasks-celery (AP_BENCH_TASKS=celery, broker AP_BENCH_CELERY_BROKER; Python 3.12+).
# The web replicas and the workers all read this module.
if os.environ.get("AP_BENCH_TASKS") in ("db", "celery"):
    AGENT_PERSISTENCE = {**AGENT_PERSISTENCE, "TURN_RUNNER": "tasks"}  # noqa: F405
    if os.environ["AP_BENCH_TASKS"] == "celery":
        CELERY_BROKER_URL = os.environ["AP_BENCH_CELERY_BROKER"]
        CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
        TASKS = {"default": {"BACKEND": "django_tasks_celery.CeleryBackend",
                             "OPTIONS": {"CELERY_APP": "benchmarks.celery_app.app"}}}
    else:
        INSTALLED_APPS = [*INSTALLED_APPS, "django_tasks", "django_tasks_db"]  # noqa: F405
        TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}

# The rolling-restart harness's overrides (agent_persistence.testing.rolling.SETTINGS_ENV, JSON merged into
# AGENT_PERSISTENCE, its AGENTS into the project's): the replicas apply them in their ASGI factory, but a task
# worker is started by its own command, so it reads them here.
if os.environ.get("AGENT_PERSISTENCE_ROLLING_SETTINGS"):
    _overrides = json.loads(os.environ["AGENT_PERSISTENCE_ROLLING_SETTINGS"])
    AGENT_PERSISTENCE = {**AGENT_PERSISTENCE, **_overrides,  # noqa: F405
                         "AGENTS": {**AGENT_PERSISTENCE["AGENTS"], **_overrides.get("AGENTS", {})}}  # noqa: F405
