"""Application configuration: wires system checks and signal receivers."""

from __future__ import annotations

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class AgentPersistenceConfig(AppConfig):
    name = "agent_persistence"
    verbose_name = _("Agent persistence")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import checks, receivers  # noqa: F401  (registers checks and receivers)
        from .realtime.delivery import connect as connect_realtime

        connect_realtime()

        from .realtime.lifespan import drain_before_twisted_shutdown

        # Under daphne (no ASGI lifespan): SIGTERM drains this process before the reactor stops.
        drain_before_twisted_shutdown()

        from django.core.signals import request_started

        from .runtime.lifecycle import on_request_started

        # REAPER_ENABLED: the reaper starts with the process's first request, whatever it serves.
        request_started.connect(on_request_started, dispatch_uid="agent_persistence.reaper")

        from .conf import app_settings

        if app_settings.TURN_RUNNER == "tasks":
            import sys

            try:
                from .runtime import workers
            except ImportError as exc:
                from django.core.exceptions import ImproperlyConfigured

                raise ImproperlyConfigured(
                    'AGENT_PERSISTENCE["TURN_RUNNER"] is "tasks" but Django\'s Tasks framework does not import '
                    f'({exc}): pip install "agent-persistence[tasks]" (docs/howto/deploy.md).'
                ) from exc

            if workers.is_worker_process(sys.argv):
                workers.drive_claims_here()
                workers.ensure_reaper()  # db_worker: the reaper starts with the worker, not with its first task
            if "celery" in sys.modules:
                workers.connect_celery()
