"""``manage.py reap_turns``: resume or close out turns whose producer is dead.

A producer is dead when its heartbeat is older than ``DEAD_AFTER``. With
``--resume`` this process claims each such turn at epoch + 1 and re-drives it
from its last checkpoint (so it must keep running until they finish); with
``--close`` (the default) each turn ends as errored with its partial answer.
``--loop`` keeps sweeping every ``REAPER_INTERVAL`` seconds.

One sweep at a time across the fleet: each sweep holds the fleet-wide sweep
lease (:class:`agent_persistence.runtime.lifecycle.SweepLease`). A one-shot run
waits for it up to ``--wait`` seconds (default: the lease's ttl, by when a
running sweep has re-taken or released it and a dead sweeper's has lapsed),
then, if another process still sweeps, says so and exits 0: that process is
doing the work. In ``--loop`` a sweep that finds the lease held is skipped and
the loop sweeps again an interval later; a sweep that fails (a database
outage) is reported and retried, the loop goes on. ``--force`` sweeps without
the lease (claims are fenced, so two sweeps at once only do work twice).

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
from ...runtime.lifecycle import SweepLease, reap_dead_turns, reaper_lease_ttl
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
        parser.add_argument("--wait", type=float, default=None,
                            help="Without --loop: seconds to wait while another process sweeps (default: the "
                                 "sweep lease's ttl, REAPER_LEASE_TTL).")
        parser.add_argument("--force", action="store_true",
                            help="Sweep without the fleet-wide sweep lease, even while another process sweeps.")

    def handle(self, *args: Any, resume: bool, loop: bool, limit: int, wait: float | None, force: bool,
               **options: Any) -> None:
        if wait is None:
            wait = 0.0 if loop else reaper_lease_ttl()
        asyncio.run(self.sweep(resume=resume, loop=loop, limit=limit, wait=max(wait, 0.0), force=force))

    async def sweep(self, *, resume: bool, loop: bool, limit: int, wait: float, force: bool) -> None:
        drained = drain_on_sigterm()
        while not is_draining():
            lease = SweepLease()
            try:
                handled = await reap_dead_turns(resume=resume, limit=limit, wait=0.0 if loop else wait, force=force,
                                                lease=lease)
            except Exception as error:  # noqa: BLE001 - a loop keeps sweeping through a database outage
                if not loop:
                    raise
                self.stderr.write(f"The sweep failed ({type(error).__name__}: {error}); retrying in "
                                  f"{app_settings.REAPER_INTERVAL} s.")
            else:
                if handled is None:
                    self.stdout.write(f"Another process is sweeping ({lease.held_by} holds the sweep lease): "
                                      + ("skipped this sweep." if loop else "nothing done here."))
                else:
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
