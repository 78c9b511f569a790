"""The in-memory supervision store: claims, heartbeats and fencing under the family's lock.

Mirrors :class:`~agent_persistence.stores.supervision.SupervisionStore`: the
row is the conversation's mutex and its lease, every claim raises the
conversation's epoch, and liveness is judged from the heartbeat's age by the
reader. One lock guards the row and the conversation, so there is no lock
order to keep.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from django.utils import timezone

from ...exceptions import Busy, Gone, NotFound, Validation
from ...models import SupervisionStatus, TurnSupervision
from ...scope import Scope
from ...statuses import QUEUED_REPLICA
from ..protocols import SupervisionStoreProtocol
from ..rules.base import clean_datetime, lookup_id, parse_id
from ..rules.fencing import clean_entries
from ..rules.supervision import (
    FINISHED_STATUSES,
    OPEN_STATUSES,
    RUNNING,
    Claim,
    PreviousTurn,
    TurnStatus,
    clean_lease_epoch,
    clean_now,
    clean_replica,
    clean_run_id,
    clean_status,
    is_claimable,
    is_dead,
    is_waiting,
    occupant_of,
    status_of,
)
from ..twins import twins_of
from .database import DEFAULT_DATABASE, MemoryDatabase, clone


class MemorySupervisionStore(twins_of(SupervisionStoreProtocol)):
    """The supervision row of each conversation, in a :class:`MemoryDatabase`."""

    def __init__(self, database: MemoryDatabase | None = None) -> None:
        self.db = database or DEFAULT_DATABASE

    # -- reading ------------------------------------------------------------------------------

    def read(self, conversation_id: Any) -> TurnSupervision | None:
        pk = lookup_id(conversation_id)
        with self.db.lock:
            row = self.db.supervision.get(pk)
            return None if row is None else clone(row)

    def status(self, scope: Scope, conversation_id: Any, *, now: datetime | None = None) -> TurnStatus:
        now = clean_now(now)
        with self.db.lock:
            conversation = self.db.readable_conversation(scope, conversation_id)
            row = self.db.supervision.get(conversation.pk)
            return status_of(clone(row) if row else None, now=now, idle_epoch=conversation.epoch)

    def list_dead(self, *, now: datetime | None = None, limit: int = 100) -> list[TurnSupervision]:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise Validation("limit must be a whole number, 1 or more.", field="limit")
        now = clean_now(now)
        with self.db.lock:
            rows = [row for row in self.db.supervision.values() if is_dead(row, now)]
            rows.sort(key=lambda row: (row.heartbeat_at, row.pk))
            return [clone(row) for row in rows[:limit]]

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
        with self.db.lock:
            conversation = self.db.conversations.get(pk)
            if conversation is None:
                raise NotFound("No such conversation.")
            row = self.db.supervision.get(pk)
            stored_epoch = row.epoch if row is not None else None
            if stored_epoch != expected_epoch or values["epoch"] <= conversation.epoch:
                return False
            self._write_claim(pk, values)
            return True

    def _write_claim(self, pk: uuid.UUID, values: dict[str, Any]) -> None:
        self.db.conversations[pk].epoch = values["epoch"]
        self.db.supervision[pk] = TurnSupervision(conversation_id=pk, **values)

    def _take(self, pk: uuid.UUID, row: TurnSupervision | None, values: dict[str, Any], now: datetime) -> Claim:
        values = {**values, "epoch": self.db.conversations[pk].epoch + 1}
        previous = PreviousTurn(row.message_id, row.run_id, row.epoch) if row is not None else None
        taken_over = row is not None and is_dead(row, now)
        self._write_claim(pk, values)
        return Claim(values["epoch"], values["message_id"], values["run_id"], taken_over, previous)

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
        with self.db.lock:
            self.db.writable_conversation(scope, pk)
            row = self.db.supervision.get(pk)
            if row is not None and is_waiting(row, now):
                raise Busy(occupant=occupant_of(row, now))
            return self._take(pk, row, values, now)

    def claim_for_resume(
        self,
        scope: Scope,
        conversation_id: Any,
        *,
        message_id: Any,
        replica: str = "",
        now: datetime | None = None,
    ) -> Claim:
        now = clean_now(now)
        message_id = parse_id(message_id, "message_id")
        replica = clean_replica(replica)
        pk = lookup_id(conversation_id)
        with self.db.lock:
            self.db.writable_conversation(scope, pk)
            row = self.db.supervision.get(pk)
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
            return self._take(pk, row, values, now)

    # -- the producer's writes ----------------------------------------------------------------

    def heartbeat_many(self, entries: list[tuple[Any, int]], *, now: datetime | None = None) -> set[uuid.UUID]:
        pairs = clean_entries(entries)
        now = clean_now(now)
        with self.db.lock:
            stamped = set()
            for pk, epoch in pairs:
                if self.db.holds(pk, epoch):
                    self.db.supervision[pk].heartbeat_at = now
                    stamped.add(pk)
            return {pk for pk, _ in pairs} - stamped

    def take_queued(self, conversation_id: Any, *, epoch: int, run_id: Any, replica: str) -> bool:
        pk = lookup_id(conversation_id)
        epoch = clean_lease_epoch(epoch)
        run_id = parse_id(run_id, "run_id")
        replica = clean_replica(replica)
        with self.db.lock:
            row = self.db.supervision.get(pk)
            if row is None or (row.epoch, row.run_id, row.status, row.replica) != (epoch, run_id, RUNNING, QUEUED_REPLICA):
                return False
            row.replica, row.heartbeat_at = replica, timezone.now()
            return True

    def finish(self, conversation_id: Any, *, epoch: int, message_id: Any, status: str) -> bool:
        pk = lookup_id(conversation_id)
        epoch = clean_lease_epoch(epoch)
        message_id = parse_id(message_id, "message_id")
        status = clean_status(status, FINISHED_STATUSES)
        with self.db.lock:
            row = self.db.supervision.get(pk)
            if row is None or (row.epoch, row.message_id, row.status) != (epoch, message_id, RUNNING):
                return False
            row.status, row.heartbeat_at = status, timezone.now()
            return True

    def delete(self, conversation_id: Any, *, message_id: Any, epoch: int) -> bool:
        pk = lookup_id(conversation_id)
        message_id = parse_id(message_id, "message_id")
        epoch = clean_lease_epoch(epoch)
        with self.db.lock:
            row = self.db.supervision.get(pk)
            if row is None or (row.message_id, row.epoch) != (message_id, epoch):
                return False
            del self.db.supervision[pk]
            return True

    # -- operators ----------------------------------------------------------------------------

    def force_release(self, conversation_id: Any) -> bool:
        pk = lookup_id(conversation_id)
        with self.db.lock:
            conversation = self.db.conversations.get(pk)
            if conversation is None:
                raise NotFound("No such conversation.")
            row = self.db.supervision.get(pk)
            if row is None or row.status not in OPEN_STATUSES:
                return False
            row.status, row.heartbeat_at = SupervisionStatus.ERRORED.value, timezone.now()
            conversation.epoch += 1
            return True
