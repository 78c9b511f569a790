"""``manage.py crash_test``: SIGKILL a producer mid-answer and resume the turn on another server.

Starts two real server processes (uvicorn serving ``ASGI_APPLICATION``) on
this project's settings and store, starts a turn of ``--agent`` on server A,
follows it over the websocket from server B, kills A with SIGKILL once
``--kill-after`` characters have streamed, resumes the turn on B and follows it
to the end. Prints lost and duplicated characters, duplicate producers and the
takeover time; exits non-zero when anything was lost or duplicated.

With ``--deploy`` it is a rolling deploy instead of a crash
(:mod:`agent_persistence.testing.rolling`): ``--replicas`` servers (``--lifespan on``),
``--turns`` turns followed from another replica than their producer, and every replica
restarted in turn with SIGTERM once ``--kill-after`` characters have streamed. The servers run
the project's settings with ``SHUTDOWN_GRACE`` set to ``--grace`` (so turns outlive it and are
handed off) and the reaper on (``REAPER_ENABLED``: what claims a hand-off), sweeping every
``--reaper-interval`` seconds (default: the project's ``REAPER_INTERVAL``). Prints lost and
duplicated characters, tool and model calls made again, and the stall of each hand-off.
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
    help = ("Kill a producer mid-answer with SIGKILL and resume its turn on a second server process; with --deploy, "
            "restart every server in turn with SIGTERM while turns stream.")

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--user", required=True, help="Username whose conversation the test creates.")
        parser.add_argument("--agent", required=True, help="A registered agent that streams a long answer.")
        parser.add_argument("--kill-after", type=int, default=200, help="Characters streamed before the kill.")
        parser.add_argument("--timeout", type=float, default=120.0, help="Seconds to wait for each step.")
        deploy = parser.add_argument_group("--deploy", "A rolling deploy (SIGTERM) instead of a crash (SIGKILL).")
        deploy.add_argument("--deploy", action="store_true",
                            help="Restart every server in turn with SIGTERM while turns stream (hand-off, not takeover).")
        deploy.add_argument("--replicas", type=int, default=3, help="Servers of the rolling deploy (at least 2).")
        deploy.add_argument("--turns", type=int, default=3, help="Turns streaming during the rolling deploy.")
        deploy.add_argument("--grace", type=float, default=1.0,
                            help="SHUTDOWN_GRACE of the servers, in seconds: turns still running after it are handed off.")
        deploy.add_argument("--reaper-interval", type=float, default=None,
                            help="REAPER_INTERVAL of the servers (default: this project's).")

    def handle(self, *args: Any, user: str, agent: str, kill_after: int, timeout: float, **options: Any) -> None:
        if options["deploy"] and (options["replicas"] < 2 or options["turns"] < 1 or options["grace"] < 0):
            # Refused before the database is read: a wrong argument is named even where the project is not migrated.
            raise CommandError("--deploy needs --replicas 2 or more, --turns 1 or more and a --grace of 0 or more.")
        check_prerequisites(user, agent)
        if options["deploy"]:
            self.deploy(user, agent, kill_after, timeout, options)
            return
        from ...testing.crash import run_crash_test  # imports websockets, checked above

        try:
            report = asyncio.run(run_crash_test(username=user, agent=agent, kill_after_chars=kill_after, timeout=timeout))
        except (RuntimeError, TimeoutError) as exc:
            raise CommandError(f"The crash test could not run: {exc}") from exc
        for line in report.lines():
            self.stdout.write(line)
        if not report.passed:
            raise CommandError("The crash test found lost or duplicated content, or more than one producer.")


    def deploy(self, user: str, agent: str, kill_after: int, timeout: float, options: dict[str, Any]) -> None:
        import os

        from ...realtime.delivery import layer_spans_processes
        from ...testing.rolling import ReplicaSpec, run_rolling_restart

        interval = app_settings.REAPER_INTERVAL if options["reaper_interval"] is None else options["reaper_interval"]
        overrides = {"SHUTDOWN_GRACE": options["grace"], "REAPER_ENABLED": True, "REAPER_INTERVAL": interval}
        claims = ("announced on the channel layer, claimed at once by a survivor" if layer_spans_processes() else
                  f"no layer spans the servers: claimed by a survivor's reaper sweep, within REAPER_INTERVAL ({interval:g} s)")
        self.stdout.write(f"servers                {options['replicas']} x uvicorn {settings.ASGI_APPLICATION}, SHUTDOWN_GRACE "
                          f"{options['grace']:g} s, reaper on; hand-offs {claims}")
        spec = ReplicaSpec(app=settings.ASGI_APPLICATION, env=dict(os.environ), overrides=overrides)
        try:
            report = asyncio.run(run_rolling_restart(
                spec, usernames=[user], agent=agent, turns=options["turns"], replicas=options["replicas"],
                restart_after_chars=kill_after, timeout=timeout,
            ))
        except (RuntimeError, TimeoutError) as exc:
            raise CommandError(f"The deploy test could not run: {exc}") from exc
        for line in report.lines():
            self.stdout.write(line)
        if not report.passed:
            raise CommandError("The deploy test found lost or duplicated content, a repeated tool call, or a turn that "
                               "did not complete.")


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
