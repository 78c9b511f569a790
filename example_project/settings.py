"""Settings of the example project.

Runs on the embedded default (SQLite in WAL mode with IMMEDIATE transactions,
the in-memory channel layer) and on PostgreSQL and Redis when DATABASE_URL /
REDIS_URL are set.
"""

from __future__ import annotations

import os
from pathlib import Path

import dj_database_url

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("AGENT_PERSISTENCE_VAR_DIR", BASE_DIR / "var"))
VAR_DIR.mkdir(parents=True, exist_ok=True)

# Development only: a real deployment reads these from its environment.
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "example-project-insecure-development-key")
DEBUG = os.environ.get("DJANGO_DEBUG", "1") == "1"
ALLOWED_HOSTS = ["*"]

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "channels",
    "agent_persistence",
    "example_project.demo",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # The admin's static files under uvicorn or daphne (runserver serves them itself while DEBUG is on).
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "example_project.urls"
ASGI_APPLICATION = "example_project.asgi.application"
WSGI_APPLICATION = None

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

SQLITE_OPTIONS = {
    "transaction_mode": "IMMEDIATE",
    "timeout": 30,
    "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
}


def database_from_environment(default_sqlite_path: Path) -> dict:
    """PostgreSQL (or any backend) from DATABASE_URL; SQLite in WAL mode otherwise."""
    url = os.environ.get("DATABASE_URL")
    if url:
        return dj_database_url.parse(url, conn_max_age=0)
    return {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(default_sqlite_path),
        "OPTIONS": dict(SQLITE_OPTIONS),
    }


# On PostgreSQL, Django's psycopg connection pool: websocket followers read from worker threads,
# and without a pool every read would open (and fork) a new server connection.
POSTGRES_POOL = {"min_size": 2, "max_size": 16}

DATABASES = {"default": database_from_environment(VAR_DIR / "db.sqlite3")}
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = POSTGRES_POOL

if os.environ.get("REDIS_URL"):
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            # redis-py's 5 s read timeout equals channels-redis's blocking receive: raise it, or
            # idle sockets are dropped every 5 s.
            "CONFIG": {"hosts": [{"address": os.environ["REDIS_URL"], "socket_timeout": 30}]},
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage", "OPTIONS": {"location": str(VAR_DIR / "media")}},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}

AGENT_PERSISTENCE = {
    # Development key only: generate your own with `python -m agent_persistence.keygen`.
    "ENCRYPTION_KEYS": [os.environ.get("AGENT_PERSISTENCE_KEY", "3q1q0V5zq4yJq8mJ9cY2o3lX6pQJb2b5m5t0Yk8n1dE=")],
    "AGENTS": {
        "demo": "example_project.demo.agents.DemoAgent",
        "long": "example_project.demo.agents.LongAgent",
        # One agent per framework bridge (agent-persistence[integrations]); see docs/howto/.
        "langgraph": "example_project.framework_agents.OrderGraph",
        "pydantic-ai": "example_project.framework_agents.SupportAgent",
        "openai-agents": "example_project.framework_agents.SupportSDKAgent",
    },
}

AUTH_PASSWORD_VALIDATORS = []
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"  # `manage.py collectstatic`, for DJANGO_DEBUG=0
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
LOGIN_URL = "/admin/login/"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.SessionAuthentication",
        "rest_framework.authentication.BasicAuthentication",
    ],
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"agent_persistence": {"handlers": ["console"], "level": "INFO"}},
}
