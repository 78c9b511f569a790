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
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from ...testing.crash import run_crash_test


class Command(BaseCommand):
    help = "Kill a producer mid-answer with SIGKILL and resume its turn on a second server process."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--user", required=True, help="Username whose conversation the test creates.")
        parser.add_argument("--agent", required=True, help="A registered agent that streams a long answer.")
        parser.add_argument("--kill-after", type=int, default=200, help="Characters streamed before the kill.")
        parser.add_argument("--timeout", type=float, default=120.0, help="Seconds to wait for each step.")

    def handle(self, *args: Any, user: str, agent: str, kill_after: int, timeout: float, **options: Any) -> None:
        report = asyncio.run(run_crash_test(username=user, agent=agent, kill_after_chars=kill_after, timeout=timeout))
        for line in report.lines():
            self.stdout.write(line)
        if not report.passed:
            raise CommandError("The crash test found lost or duplicated content, or more than one producer.")
