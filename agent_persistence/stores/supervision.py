"""Turn supervision: one row per conversation saying who produces its turn, and fencing.

The row is the conversation's mutex (a live RUNNING row refuses a second turn)
and its ownership lease: every claim raises ``Conversation.epoch`` and writes
the row at that epoch, and every producer write goes through :func:`fence`,
which fails once a newer epoch holds the conversation. Liveness is judged by
the reader from the heartbeat's age; no "dead" status is ever stored.

Lock order: the supervision row, then the conversation row, as every turn
transition takes them (written down once, in :mod:`.turns`); the fence itself
lives in :mod:`.fencing`.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Callable

from django.db import IntegrityError, transaction
from django.utils import timezone

from ..exceptions import Busy, Conflict, Gone, NotFound, Validation
from ..models import Conversation, SupervisionStatus, TurnSupervision
from ..scope import Scope
from ..statuses import QUEUED_REPLICA
from .base import (
    clean_datetime,
    lookup_id,
    parse_id,
    readable_conversation,
    writable_conversation,
)
from .fencing import (
    clean_lease_epoch,
    fence,  # noqa: F401  (importable from here, where it used to live)
    fence_many,
    lock_turn,
)
from .protocols import SupervisionStoreProtocol
from .rules.supervision import (
    FINISHED_STATUSES,
    OPEN_STATUSES,
    RUNNING,
    Claim,
    PreviousTurn,
    TurnStatus,
    clean_now,
    clean_replica,
    clean_run_id,
    clean_status,
    dead_q,
    is_claimable,
    is_dead,
    is_waiting,
    occupant_of,
    status_of,
)
from .rules.supervision import (  # re-exported: these rules moved to agent_persistence/stores/rules/supervision.py
    heartbeat_age as heartbeat_age,
)
from .twins import twins_of

# -- what readers get -------------------------------------------------------------------------


# -- cleaning ---------------------------------------------------------------------------------


class _Lost(Exception):
    """Rolls back a compare-and-swap whose second write found the row changed."""


# -- the store --------------------------------------------------------------------------------


class SupervisionStore(twins_of(SupervisionStoreProtocol)):
    """The supervision row of each conversation: claims, heartbeats, terminal status."""

    # -- reading ------------------------------------------------------------------------------

    def read(self, conversation_id: Any) -> TurnSupervision | None:
        """The stored row, unscoped (for the runtime); None when there is none."""
        return TurnSupervision.objects.filter(pk=lookup_id(conversation_id)).first()

    def status(self, scope: Scope, conversation_id: Any, *, now: datetime | None = None) -> TurnStatus:
        """The turn status a reader of the conversation sees; NotFound when it may not read it."""
        conversation = readable_conversation(scope, conversation_id)
        row = TurnSupervision.objects.filter(pk=conversation.pk).first()
        return status_of(row, now=clean_now(now), idle_epoch=conversation.epoch)

    def list_dead(self, *, now: datetime | None = None, limit: int = 100) -> list[TurnSupervision]:
        """Running rows whose heartbeat is older than ``DEAD_AFTER``, oldest first (for the reaper)."""
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise Validation("limit must be a whole number, 1 or more.", field="limit")
        queryset = TurnSupervision.objects.filter(dead_q(clean_now(now)))
        return list(queryset.order_by("heartbeat_at", "pk")[:limit])

    # -- claiming -----------------------------------------------------------------------------

    def compare_and_swap(
        self,
        conversation_id: Any,
        expected_epoch: int | None,
        *,
        status: str,
        message_id: Any,
        epoch: int,
        run_id: Any = None,
        replica: str = "",
        heartbeat_at: datetime | None = None,
    ) -> bool:
        """Write the row iff it holds ``expected_epoch`` (None: iff there is no row).

        ``epoch`` must also be greater than the conversation's epoch, which is
        raised to it in the same transaction, so an epoch is never handed out
        twice, even after the row was deleted. Returns whether it wrote;
        NotFound when the conversation does not exist.
        """
        pk = lookup_id(conversation_id)
        if expected_epoch is not None:
            clean_lease_epoch(expected_epoch, "expected_epoch", minimum=0)
        values = {
            "status": clean_status(status, SupervisionStatus.values),
            "message_id": parse_id(message_id, "message_id"),
            "run_id": clean_run_id(run_id),
            "epoch": clean_lease_epoch(epoch),
            "replica": clean_replica(replica),
            "heartbeat_at": clean_datetime(heartbeat_at, "heartbeat_at") or timezone.now(),
            "claimed_at": timezone.now(),
        }
        try:
            with transaction.atomic():
                row, conversation = _lock_turn(pk, lambda: _lock_conversation(pk))
                stored_epoch = row.epoch if row is not None else None
                if stored_epoch != expected_epoch or epoch <= conversation.epoch:
                    return False
                _write_claim(conversation, row, values)
        except _Lost:
            return False
        return True

    def claim(
        self,
        scope: Scope,
        conversation_id: Any,
        *,
        message_id: Any,
        run_id: Any = None,
        replica: str = "",
        now: datetime | None = None,
    ) -> Claim:
        """Start a turn: take the conversation at its next epoch, unless a live turn holds it.

        Busy (409) carries the live occupant; NotFound / ConversationNotOwned
        when ``scope`` may not write the conversation. A finished row, or a
        running one whose producer is dead, is replaced.
        """
        now = clean_now(now)
        values = {
            "status": RUNNING,
            "message_id": parse_id(message_id, "message_id"),
            "run_id": clean_run_id(run_id),
            "replica": clean_replica(replica),
            "heartbeat_at": now,
            "claimed_at": now,
        }
        pk = lookup_id(conversation_id)
        with transaction.atomic():
            row, conversation = _lock_turn(pk, lambda: writable_conversation(scope, pk, for_update=True))
            if row is not None and is_waiting(row, now):
                raise Busy(occupant=occupant_of(row, now))
            return _take(conversation, row, values, now)

    def claim_for_resume(
        self,
        scope: Scope,
        conversation_id: Any,
        *,
        message_id: Any,
        replica: str = "",
        now: datetime | None = None,
    ) -> Claim:
        """Take over the dead producer of turn ``message_id``, keeping its message and run.

        Busy while that producer is alive; Gone (code "turn_not_resumable")
        when the turn finished, another turn holds the conversation, or there
        is no turn at all.
        """
        now = clean_now(now)
        message_id = parse_id(message_id, "message_id")
        replica = clean_replica(replica)
        pk = lookup_id(conversation_id)
        with transaction.atomic():
            row, conversation = _lock_turn(pk, lambda: writable_conversation(scope, pk, for_update=True))
            if row is None or row.message_id != message_id or row.status not in OPEN_STATUSES:
                raise Gone("This turn is not running, so it cannot be resumed.", code="turn_not_resumable")
            if not is_claimable(row, now):
                raise Busy(occupant=occupant_of(row, now))
            values = {
                "status": RUNNING,
                "message_id": row.message_id,
                "run_id": row.run_id,
                "replica": replica,
                "heartbeat_at": now,
                "claimed_at": now,
            }
            return _take(conversation, row, values, now)

    # -- the producer's writes ----------------------------------------------------------------

    def heartbeat_many(self, entries: list[tuple[Any, int]], *, now: datetime | None = None) -> set[uuid.UUID]:
        """Stamp every live turn of this process in one statement; return the fenced conversation ids.

        ``entries`` are ``(conversation_id, epoch)`` pairs; a turn is fenced
        when its row is no longer running at that epoch (taken over, released,
        finished or deleted). Its producer must stop. A row another
        transaction holds locked is skipped this time (PostgreSQL), so one
        stalled conversation never stops the heartbeats of the others.
        """
        return fence_many(entries, now=now, skip_locked=True)

    def take_queued(self, conversation_id: Any, *, epoch: int, run_id: Any, replica: str) -> bool:
        """A worker takes a turn enqueued for it (``TURN_RUNNER = "tasks"``): its first heartbeat, one statement.

        Writes ``replica`` and the heartbeat iff the row still runs ``run_id`` at ``epoch`` and waits for a
        worker (its replica is :data:`~agent_persistence.statuses.QUEUED_REPLICA`). Returns whether it did:
        a task run twice, or one whose turn was taken over, ended or fenced meanwhile, takes nothing.
        """
        updated = TurnSupervision.objects.filter(
            pk=lookup_id(conversation_id),
            epoch=clean_lease_epoch(epoch),
            run_id=parse_id(run_id, "run_id"),
            status=RUNNING,
            replica=QUEUED_REPLICA,
        ).update(replica=clean_replica(replica), heartbeat_at=timezone.now())
        return bool(updated)

    def finish(self, conversation_id: Any, *, epoch: int, message_id: Any, status: str) -> bool:
        """Write the terminal status (done | errored) iff the row still runs that epoch and message.

        Returns whether it wrote; a turn is finished once, and a taken over or
        released turn is not finished by its old producer.
        """
        updated = TurnSupervision.objects.filter(
            pk=lookup_id(conversation_id),
            epoch=clean_lease_epoch(epoch),
            message_id=parse_id(message_id, "message_id"),
            status=RUNNING,
        ).update(status=clean_status(status, FINISHED_STATUSES), heartbeat_at=timezone.now())
        return bool(updated)

    def delete(self, conversation_id: Any, *, message_id: Any, epoch: int) -> bool:
        """Remove the row iff it still holds ``message_id`` at ``epoch``; returns whether it did."""
        deleted, _ = TurnSupervision.objects.filter(
            pk=lookup_id(conversation_id), message_id=parse_id(message_id, "message_id"), epoch=clean_lease_epoch(epoch)
        ).delete()
        return bool(deleted)

    # -- operators ----------------------------------------------------------------------------

    def force_release(self, conversation_id: Any) -> bool:
        """Operator action: mark a running turn errored and fence its producer.

        The conversation's epoch is raised by one, so the next claim is a new
        generation too. Returns False when no turn is running.
        """
        pk = lookup_id(conversation_id)
        with transaction.atomic():
            row, conversation = _lock_turn(pk, lambda: _lock_conversation(pk))
            if row is None or row.status not in OPEN_STATUSES:
                return False
            released = TurnSupervision.objects.filter(pk=pk, epoch=row.epoch, status=row.status).update(
                status=SupervisionStatus.ERRORED, heartbeat_at=timezone.now()
            )
            raised = Conversation.objects.filter(pk=pk, epoch=conversation.epoch).update(epoch=conversation.epoch + 1)
            if not (released and raised):
                raise _inconsistent()
            return True


# -- the claim's read-decide-write ------------------------------------------------------------


def _lock_conversation(pk: uuid.UUID) -> Conversation:
    conversation = Conversation.objects.select_for_update().filter(pk=pk).first()
    if conversation is None:
        raise NotFound("No such conversation.")
    return conversation


def _lock_turn(
    pk: uuid.UUID, lock_conversation: Callable[[], Conversation]
) -> tuple[TurnSupervision | None, Conversation]:
    """Locks 1 and 2 of the lock order (:func:`.fencing.lock_turn`), then ``lock_conversation``'s checks.

    The conversation is already locked by then, so ``lock_conversation`` (the
    scope's write check, or a plain lock) only re-reads it in this transaction.
    """
    row, conversation = lock_turn(pk)
    if conversation is None:
        raise NotFound("No such conversation.")
    return row, lock_conversation()


def _take(conversation: Conversation, row: TurnSupervision | None, values: dict[str, Any], now: datetime) -> Claim:
    """Write the claim at the conversation's next epoch; the caller checked the row may go."""
    values = {**values, "epoch": conversation.epoch + 1}
    previous = PreviousTurn(row.message_id, row.run_id, row.epoch) if row is not None else None
    taken_over = row is not None and is_dead(row, now)
    try:
        _write_claim(conversation, row, values)
    except _Lost:
        # Both rows were read under their locks, so only a writer that ignores the locks gets here.
        raise _inconsistent() from None
    return Claim(values["epoch"], values["message_id"], values["run_id"], taken_over, previous)


def _write_claim(conversation: Conversation, row: TurnSupervision | None, values: dict[str, Any]) -> None:
    """Raise the conversation's epoch and write the row, each conditionally; _Lost rolls both back."""
    with transaction.atomic():
        raised = Conversation.objects.filter(pk=conversation.pk, epoch=conversation.epoch).update(epoch=values["epoch"])
        if not raised:
            raise _Lost()
        if row is None:
            try:
                with transaction.atomic():
                    TurnSupervision.objects.create(conversation_id=conversation.pk, **values)
            except IntegrityError:
                raise _Lost() from None
        elif not TurnSupervision.objects.filter(pk=conversation.pk, epoch=row.epoch).update(**values):
            raise _Lost()


def _inconsistent() -> Conflict:
    return Conflict("The conversation's turn changed while it was being claimed; try again.", code="claim_conflict")
