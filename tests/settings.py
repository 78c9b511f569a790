"""Settings of the test suite: SQLite by default, PostgreSQL when DATABASE_URL is set.

The SQLite test database is a real file (WAL, IMMEDIATE transactions), named
after the test process, so threads and forked processes race real
transactions on it and two test runs never share one.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from example_project.settings import SQLITE_OPTIONS, database_from_environment

SECRET_KEY = "tests-insecure-key"
DEBUG = False
ALLOWED_HOSTS = ["*"]
USE_TZ = True
TIME_ZONE = "UTC"

TMP_DIR = Path(tempfile.gettempdir()) / f"agent_persistence_tests_{os.getpid()}"
TMP_DIR.mkdir(parents=True, exist_ok=True)

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "channels",
    "agent_persistence",
]

MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

ROOT_URLCONF = "tests.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

DATABASES = {"default": database_from_environment(TMP_DIR / "db.sqlite3")}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"]["TEST"] = {"NAME": str(TMP_DIR / "test.sqlite3")}
    DATABASES["default"]["OPTIONS"] = dict(SQLITE_OPTIONS)
else:
    # Parallel test runs (several developers, CI) each get their own database.
    suffix = os.environ.get("AGENT_PERSISTENCE_TEST_DB_SUFFIX", "")
    DATABASES["default"]["TEST"] = {"NAME": f"test_agent_persistence{suffix}"}

# A process started by a test (tests/turn_process.py) joins that test's database.
if os.environ.get("AP_TEST_DB_NAME"):
    DATABASES["default"]["NAME"] = os.environ["AP_TEST_DB_NAME"]

# A server process on PostgreSQL with Django's psycopg pool: AP_DB_POOL = "min,max,timeout" (OPTIONS["pool"]).
if os.environ.get("AP_DB_POOL") and DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    min_size, max_size, timeout = (float(part) for part in os.environ["AP_DB_POOL"].split(","))
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {"min_size": int(min_size), "max_size": int(max_size), "timeout": timeout}

CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage", "OPTIONS": {"location": str(TMP_DIR / "media")}},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}

AGENT_PERSISTENCE = {
    "ENCRYPTION_KEYS": ["cw_0x689RpI-jtRR7oE8h_eQsKImvJapLeSbXpwF4e4="],
    "AGENTS": {
        "scripted": "tests.agents.ScriptedAgent",
        "approval": "tests.agents.ApprovalAgent",
        "failing": "tests.agents.FailingAgent",
        "echo": "tests.agents.EchoAgent",
    },
}
if os.environ.get("AP_FAST_TIMINGS"):
    # Crash tests: a dead producer is noticed in about a second.
    AGENT_PERSISTENCE.update(
        {"HEARTBEAT_INTERVAL": 0.2, "DEAD_AFTER": 1.0, "RECORDING_FLUSH_INTERVAL": 0.1, "CHECKPOINT_INTERVAL": 0.5}
    )

STATIC_URL = "static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
