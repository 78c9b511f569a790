"""``manage.py reap_turns``: resume or close out turns whose producer is dead.

A producer is dead when its heartbeat is older than ``DEAD_AFTER``. With
``--resume`` this process claims each such turn at epoch + 1 and re-drives it
from its last checkpoint (so it must keep running until they finish); with
``--close`` (the default) each turn ends as errored with its partial answer.
``--loop`` keeps sweeping every ``REAPER_INTERVAL`` seconds.

On SIGTERM (or SIGINT) the command drains as a server does
(:func:`agent_persistence.runtime.shutdown.drain`): it stops sweeping, lets the
turns it resumed run for ``SHUTDOWN_GRACE`` seconds and hands the others off,
so another process claims them at once, then exits.
"""

from __future__ import annotations

import asyncio
from typing import Any

from django.core.management.base import BaseCommand

from ...conf import app_settings
from ...runtime.lifecycle import reap_dead_turns
from ...runtime.producer import Supervisor
from ...runtime.shutdown import drain_on_sigterm, is_draining


class Command(BaseCommand):
    help = "Resume (--resume) or close out (--close, the default) turns whose producer is dead."

    def add_arguments(self, parser: Any) -> None:
        mode = parser.add_mutually_exclusive_group()
        mode.add_argument("--resume", action="store_true", help="Re-drive dead turns in this process.")
        mode.add_argument("--close", action="store_true", help="End dead turns as errored (default).")
        parser.add_argument("--loop", action="store_true", help="Keep sweeping every REAPER_INTERVAL seconds.")
        parser.add_argument("--limit", type=int, default=100, help="At most this many turns per sweep.")

    def handle(self, *args: Any, resume: bool, loop: bool, limit: int, **options: Any) -> None:
        asyncio.run(self.sweep(resume=resume, loop=loop, limit=limit))

    async def sweep(self, *, resume: bool, loop: bool, limit: int) -> None:
        drained = drain_on_sigterm()
        while not is_draining():
            handled = await reap_dead_turns(resume=resume, limit=limit)
            verb = "Resumed" if resume else "Closed out"
            self.stdout.write(f"{verb} {len(handled)} dead turn(s).")
            if not loop:
                break
            try:  # the next sweep, unless a SIGTERM comes first
                await asyncio.wait_for(asyncio.shield(drained), app_settings.REAPER_INTERVAL)
            except TimeoutError:
                continue
        if is_draining():
            report = await drained
            self.stdout.write(f"Shut down: {report.handed_off} turn(s) handed off, {report.left} left for a reaper.")
        # Resumed turns run in this process: wait for them before exiting (a drain has ended or handed them off).
        producers = list(Supervisor.current().producers.values())
        await asyncio.gather(*(p.task for p in producers if p.task is not None), return_exceptions=True)
