"""``manage.py sweep``: the retention sweeps, each in batches of ``SWEEP_BATCH_SIZE``.

- expired files (``expires_at`` passed): record and content;
- events older than ``EVENT_RETENTION`` seconds (kept forever when it is None);
- stream recordings of finished turns older than ``RECORDING_RETENTION``;
- lapsed interrupts (``expires_at`` passed) become cancelled;
- expired MCP OAuth pending authorizations (a record left empty is deleted);
- websocket tickets that expired (spent or not).

Each sweep repeats its batch until a batch comes back short, so one run
catches up; every batch is its own short transaction, and several sweepers may
run at once. ``--only`` limits the run to some sweeps.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Callable

from django.core.management.base import BaseCommand
from django.utils import timezone

from ...conf import app_settings
from ...stores import event_store, file_store, interrupt_store, recording_store


def sweep_files(batch: int) -> int:
    return file_store().purge_expired(before=timezone.now(), limit=batch)


def sweep_events(batch: int) -> int:
    if app_settings.EVENT_RETENTION is None:
        return 0
    return event_store().prune(before=timezone.now() - timedelta(seconds=app_settings.EVENT_RETENTION), limit=batch)


def sweep_recordings(batch: int) -> int:
    return recording_store().purge(
        finished_before=timezone.now() - timedelta(seconds=app_settings.RECORDING_RETENTION), limit=batch
    )


def sweep_interrupts(batch: int) -> int:
    return interrupt_store().expire_lapsed(now=timezone.now(), limit=batch)


def sweep_oauth(batch: int) -> int:
    from ...oauth.store import integration_store

    return integration_store().purge_expired_pendings(now=timezone.now(), limit=batch)


def sweep_tickets(batch: int) -> int:
    from ...realtime.tickets import purge_expired_tickets

    return purge_expired_tickets(before=timezone.now(), limit=batch)


SWEEPS: dict[str, Callable[[int], int]] = {
    "files": sweep_files,
    "events": sweep_events,
    "recordings": sweep_recordings,
    "interrupts": sweep_interrupts,
    "oauth": sweep_oauth,
    "tickets": sweep_tickets,
}


def run_sweep(sweep: Callable[[int], int], batch: int) -> int:
    total = 0
    while True:
        done = sweep(batch)
        total += done
        if done < batch:
            return total


class Command(BaseCommand):
    help = "Delete expired files, old events, recordings of finished turns and OAuth pendings; cancel lapsed interrupts."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--only", action="append", choices=sorted(SWEEPS), help="Run only this sweep (repeatable).")
        parser.add_argument("--batch-size", type=int, default=None, help="Rows per batch (default SWEEP_BATCH_SIZE).")

    def handle(self, *args: Any, only: list[str] | None, batch_size: int | None, **options: Any) -> None:
        batch = batch_size or app_settings.SWEEP_BATCH_SIZE
        for name in only or SWEEPS:
            count = run_sweep(SWEEPS[name], batch)
            self.stdout.write(f"{name}: {count}")
