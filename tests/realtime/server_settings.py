"""Settings of the end-to-end server processes: the test settings, with Redis when REDIS_URL is set.

``AP_ACCESS_CHECK_INTERVAL`` shortens the websocket access sweep; the fault tests' agent ``paced``
(``tests/realtime/agents.py``) is registered beside the suite's agents.
"""

from __future__ import annotations

import os

from tests.settings import *  # noqa: F401,F403
from tests.settings import AGENT_PERSISTENCE

if os.environ.get("REDIS_URL"):
    # redis-py 8 reads with a 5 s socket timeout by default, the same as channels-redis's
    # 5 s blocking receive: an idle socket's receive would time out and close it.
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [{"address": os.environ["REDIS_URL"], "socket_timeout": 30}]},
        }
    }

AGENT_PERSISTENCE = {**AGENT_PERSISTENCE, "AGENTS": {**AGENT_PERSISTENCE["AGENTS"], "paced": "tests.realtime.agents.PacedAgent"}}

if os.environ.get("AP_ACCESS_CHECK_INTERVAL"):
    AGENT_PERSISTENCE = {**AGENT_PERSISTENCE, "WEBSOCKET_ACCESS_CHECK_INTERVAL": float(os.environ["AP_ACCESS_CHECK_INTERVAL"])}

if os.environ.get("AP_REAPER_INTERVAL"):  # the in-process reaper on, sweeping at this pace
    AGENT_PERSISTENCE = {**AGENT_PERSISTENCE, "REAPER_ENABLED": True, "REAPER_INTERVAL": float(os.environ["AP_REAPER_INTERVAL"])}

if os.environ.get("AP_SHUTDOWN_GRACE"):  # the hand-off tests: a short grace, so a long turn is handed off
    AGENT_PERSISTENCE = {**AGENT_PERSISTENCE, "SHUTDOWN_GRACE": float(os.environ["AP_SHUTDOWN_GRACE"])}

if os.environ.get("AP_TURN_RUNNER") == "tasks":  # the worker tier: producers on db_worker (or Celery) processes
    AGENT_PERSISTENCE = {**AGENT_PERSISTENCE, "TURN_RUNNER": "tasks"}
    if os.environ.get("AP_CELERY_BROKER"):  # Celery through django-tasks-celery (Django 6, Python 3.12+)
        CELERY_BROKER_URL = os.environ["AP_CELERY_BROKER"]
        CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
        TASKS = {"default": {"BACKEND": "django_tasks_celery.CeleryBackend",
                             "OPTIONS": {"CELERY_APP": "tests.realtime.celery_app.app"}}}
    else:  # django-tasks-db's db_worker
        INSTALLED_APPS = [*INSTALLED_APPS, "django_tasks", "django_tasks_db"]  # noqa: F405
        TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
