"""``manage.py crash_test``: SIGKILL a producer mid-answer and resume the turn on another server.

Starts two real server processes (uvicorn serving ``ASGI_APPLICATION``) on
this project's settings and store, starts a turn of ``--agent`` on server A,
follows it over the websocket from server B, kills A with SIGKILL once
``--kill-after`` characters have streamed, resumes the turn on B and follows it
to the end. Prints lost and duplicated characters, duplicate producers and the
takeover time; exits non-zero when anything was lost or duplicated.
"""

from __future__ import annotations

import asyncio
from importlib.util import find_spec
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.utils.module_loading import import_string

from ...conf import app_settings

# What the crash test runs on, and how a user gets it (the [server] extra installs daphne, not these).
CLIENT_AND_SERVER = {
    "uvicorn": "the crash test serves ASGI_APPLICATION with uvicorn",
    "websockets": "the crash test follows the turn with the websockets client",
}


class Command(BaseCommand):
    help = "Kill a producer mid-answer with SIGKILL and resume its turn on a second server process."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--user", required=True, help="Username whose conversation the test creates.")
        parser.add_argument("--agent", required=True, help="A registered agent that streams a long answer.")
        parser.add_argument("--kill-after", type=int, default=200, help="Characters streamed before the kill.")
        parser.add_argument("--timeout", type=float, default=120.0, help="Seconds to wait for each step.")

    def handle(self, *args: Any, user: str, agent: str, kill_after: int, timeout: float, **options: Any) -> None:
        check_prerequisites(user, agent)
        from ...testing.crash import run_crash_test  # imports websockets, checked above

        try:
            report = asyncio.run(run_crash_test(username=user, agent=agent, kill_after_chars=kill_after, timeout=timeout))
        except (RuntimeError, TimeoutError) as exc:
            raise CommandError(f"The crash test could not run: {exc}") from exc
        for line in report.lines():
            self.stdout.write(line)
        if not report.passed:
            raise CommandError("The crash test found lost or duplicated content, or more than one producer.")


def check_prerequisites(username: str, agent: str) -> None:
    """A CommandError naming the missing piece, before any server starts."""
    missing = [module for module in CLIENT_AND_SERVER if find_spec(module) is None]
    if missing:
        reasons = "; ".join(CLIENT_AND_SERVER[module] for module in missing)
        raise CommandError(f"{' and '.join(missing)} not installed: {reasons}. Install with: pip install {' '.join(missing)}")
    path = getattr(settings, "ASGI_APPLICATION", None)
    if not path:
        raise CommandError(
            "settings.ASGI_APPLICATION is not set: the crash test starts two servers of it. "
            "Add ASGI_APPLICATION = \"mysite.asgi.application\" (docs/howto/deploy.md)."
        )
    try:
        import_string(path)
    except Exception as exc:
        raise CommandError(f"settings.ASGI_APPLICATION = {path!r} does not import: {exc.__class__.__name__}: {exc}") from exc
    if agent not in app_settings.AGENTS:
        registered = ", ".join(sorted(app_settings.AGENTS)) or "none"
        raise CommandError(f"No agent is registered as {agent!r} (AGENT_PERSISTENCE['AGENTS'] has: {registered}).")
    user_model = get_user_model()
    if not user_model._default_manager.filter(**{user_model.USERNAME_FIELD: username}).exists():
        raise CommandError(f"No user {username!r}: the crash test creates a conversation of an existing user (--user).")
