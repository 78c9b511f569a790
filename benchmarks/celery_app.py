"""The Celery app of ``benchmarks deploy --runner tasks --backend celery`` (``celery -A benchmarks.celery_app worker``).

Its broker is ``AP_BENCH_CELERY_BROKER`` (``CELERY_BROKER_URL`` in ``benchmarks/settings.py``);
django-tasks-celery registers ``agent_persistence.runtime.workers.drive_turn`` on it when the
workers module is imported (``AppConfig.ready``, ``TURN_RUNNER = "tasks"``).
"""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")

app = Celery("agent_persistence_benchmarks")
app.config_from_object("django.conf:settings", namespace="CELERY")

import django  # noqa: E402
from django.apps import apps  # noqa: E402

if not apps.ready:
    django.setup()
