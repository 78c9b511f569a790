"""The Celery app of the worker-tier tests (``celery -A tests.realtime.celery_app worker``), on the server settings.

Its broker is ``AP_CELERY_BROKER`` (``CELERY_BROKER_URL`` in ``tests/realtime/server_settings.py``);
django-tasks-celery registers ``agent_persistence.runtime.workers.drive_turn`` on it when the
workers module is imported (``AppConfig.ready``, ``TURN_RUNNER = "tasks"``).
"""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.realtime.server_settings")

app = Celery("agent_persistence_tests")
app.config_from_object("django.conf:settings", namespace="CELERY")

import django  # noqa: E402
from django.apps import apps  # noqa: E402

if not apps.ready:
    django.setup()
