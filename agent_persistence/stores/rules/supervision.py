"""The backend-neutral rules of the supervision concern: what both store families check and build the same way.

The ORM store (:mod:`agent_persistence.stores.supervision`) and its in-memory twin
import these; nothing here reads or writes a table.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Iterable, NamedTuple

from django.db.models import Q
from django.utils import timezone

from ...conf import app_settings
from ...exceptions import Validation
from ...models import SupervisionStatus, TurnSupervision
from ...statuses import QUEUED_REPLICA, TurnState
from .base import clean_datetime, clean_text, parse_id
from .fencing import clean_lease_epoch as clean_lease_epoch

RUNNING = SupervisionStatus.RUNNING.value
#: A turn its producer released at a shutdown (:meth:`TurnStore.hand_off`): open, held by no producer.
HANDED_OFF = SupervisionStatus.HANDED_OFF.value
#: The stored statuses of a turn that has not ended (a producer holds it, or it waits for one).
OPEN_STATUSES = (RUNNING, HANDED_OFF)


FINISHED_STATUSES = (SupervisionStatus.DONE.value, SupervisionStatus.ERRORED.value)


@dataclass(frozen=True)
class TurnStatus:
    """The state of a conversation's turn, judged at read time.

    ``state`` is "idle" (no row), "alive" or "dead" (a running row whose
    heartbeat is at most / more than ``DEAD_AFTER`` seconds old),
    "handing_off" (a ``handed_off`` row: released at a shutdown, claimable
    at once), "done" or "errored". ``epoch`` is the row's epoch, or the
    conversation's when idle.
    """

    state: str
    message_id: uuid.UUID | None = None
    run_id: uuid.UUID | None = None
    epoch: int = 0
    replica: str = ""
    heartbeat_age: float | None = None
    heartbeat_at: datetime | None = None

    @property
    def running(self) -> bool:
        """A producer holds the turn, alive or dead."""
        return self.state in (TurnState.ALIVE, TurnState.DEAD, TurnState.HANDING_OFF)


class PreviousTurn(NamedTuple):
    """The turn a claim replaced."""

    message_id: uuid.UUID
    run_id: uuid.UUID | None
    epoch: int


@dataclass(frozen=True)
class Claim:
    """A won claim: the producer's ``epoch`` and what it replaced.

    ``taken_over`` is true when the previous row was a dead running turn.
    """

    epoch: int
    message_id: uuid.UUID
    run_id: uuid.UUID | None
    taken_over: bool
    previous: PreviousTurn | None


def heartbeat_age(row: TurnSupervision, now: datetime) -> float:
    """Seconds since the row's heartbeat; a clock slightly ahead on another replica reads as 0."""
    return max(0.0, (now - row.heartbeat_at).total_seconds())


def dead_after(row: TurnSupervision) -> float:
    """Seconds without a heartbeat after which the row's turn is dead: ``DEAD_AFTER``, or ``QUEUED_DEAD_AFTER`` while
    it waits for a worker (``TURN_RUNNER = "tasks"``: a queue a little behind is not a crash)."""
    return app_settings.QUEUED_DEAD_AFTER if row.replica == QUEUED_REPLICA else app_settings.DEAD_AFTER


def dead_q(now: datetime, prefix: str = "") -> Q:
    """The running rows (``prefix`` reaches them from another model) whose turn is dead at ``now``, as :func:`is_dead` says."""
    queued = Q(**{f"{prefix}replica": QUEUED_REPLICA})
    return Q(**{f"{prefix}status": RUNNING}) & (
        (~queued & Q(**{f"{prefix}heartbeat_at__lt": now - timedelta(seconds=app_settings.DEAD_AFTER)}))
        | (queued & Q(**{f"{prefix}heartbeat_at__lt": now - timedelta(seconds=app_settings.QUEUED_DEAD_AFTER)}))
    )


def is_dead(row: TurnSupervision, now: datetime) -> bool:
    """A running row whose producer stopped heartbeating more than ``DEAD_AFTER`` seconds ago (see :func:`dead_after`)."""
    return row.status == RUNNING and heartbeat_age(row, now) > dead_after(row)


def is_claimable(row: TurnSupervision, now: datetime) -> bool:
    """A turn no producer holds that a resume may take over now: a dead producer's, or one handed off."""
    return row.status == HANDED_OFF or is_dead(row, now)


def is_waiting(row: TurnSupervision, now: datetime) -> bool:
    """An open turn that refuses a new turn of its conversation (Busy): alive, or handed off within ``DEAD_AFTER``.

    A handed-off turn nobody claimed for ``DEAD_AFTER`` (no replica runs a reaper) is replaced by a new
    turn as a dead producer's is, so a conversation is never stuck behind it.
    """
    if row.status == HANDED_OFF:
        return heartbeat_age(row, now) <= app_settings.DEAD_AFTER
    return row.status == RUNNING and not is_dead(row, now)


def status_of(row: TurnSupervision | None, *, now: datetime | None = None, idle_epoch: int = 0) -> TurnStatus:
    """The :class:`TurnStatus` a row stands for at ``now`` (the admin shows the same verdict)."""
    if row is None:
        return TurnStatus(state=TurnState.IDLE, epoch=idle_epoch)
    now = now or timezone.now()
    if row.status == RUNNING:
        state = TurnState.DEAD if is_dead(row, now) else TurnState.ALIVE
        if state == TurnState.ALIVE and row.replica == QUEUED_REPLICA:
            state = TurnState.QUEUED  # enqueued for a worker (TURN_RUNNER "tasks"), which has not taken it yet
    elif row.status == HANDED_OFF:
        state = TurnState.HANDING_OFF
    else:
        state = row.status
    return TurnStatus(
        state=state,
        message_id=row.message_id,
        run_id=row.run_id,
        epoch=row.epoch,
        replica=row.replica,
        heartbeat_age=heartbeat_age(row, now),
        heartbeat_at=row.heartbeat_at,
    )


def occupant_of(row: TurnSupervision, now: datetime) -> dict[str, Any]:
    """The live turn a refused claim reports (the 409's details)."""
    return {
        "message_id": str(row.message_id),
        "run_id": str(row.run_id) if row.run_id else None,
        "heartbeat_age": round(heartbeat_age(row, now), 3),
        "epoch": row.epoch,
    }


def clean_now(value: Any) -> datetime:
    return clean_datetime(value, "now") or timezone.now()


def clean_status(value: Any, allowed: Iterable[str]) -> str:
    allowed = tuple(allowed)
    if value not in allowed:
        raise Validation(f"status must be one of {', '.join(allowed)}.", field="status")
    return str(value)


def clean_replica(value: Any) -> str:
    return clean_text(value, "replica", max_length=255) or ""


def clean_run_id(value: Any) -> uuid.UUID | None:
    return None if value is None else parse_id(value, "run_id")
