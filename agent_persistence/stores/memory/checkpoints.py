"""The in-memory checkpoint store: one state blob per conversation, fenced by the producer's epoch."""

from __future__ import annotations

import uuid
from typing import Any

from django.utils import timezone

from ...exceptions import Fenced
from ...models import AgentCheckpoint
from ...scope import Scope
from ..protocols import CheckpointStoreProtocol
from ..rules.base import lookup_id, parse_id
from ..rules.checkpoints import clean_state
from ..rules.supervision import clean_lease_epoch
from ..twins import twins_of
from .database import DEFAULT_DATABASE, MemoryDatabase, clone


class MemoryCheckpointStore(twins_of(CheckpointStoreProtocol)):
    """The agent checkpoint of each conversation, in a :class:`MemoryDatabase`."""

    def __init__(self, database: MemoryDatabase | None = None) -> None:
        self.db = database or DEFAULT_DATABASE

    def load(self, conversation_id: Any) -> dict[str, Any]:
        pk = lookup_id(conversation_id)
        with self.db.lock:
            checkpoint = self.db.checkpoints.get(pk)
            return clone(checkpoint.state) if checkpoint is not None else {}

    def load_for(self, scope: Scope, conversation_id: Any) -> dict[str, Any]:
        with self.db.lock:
            return self.load(self.db.readable_conversation(scope, conversation_id).pk)

    def _write(self, pk: uuid.UUID, values: dict[str, Any]) -> bool:
        """Replace the checkpoint unless a newer epoch's is stored (the caller holds the lock)."""
        stored = self.db.checkpoints.get(pk)
        if stored is not None and stored.epoch > values["epoch"]:
            return False
        self.db.checkpoints[pk] = AgentCheckpoint(conversation_id=pk, **values)
        return True

    def save(self, conversation_id: Any, state: dict[str, Any], *, epoch: int, message_id: Any = None) -> None:
        pk = lookup_id(conversation_id)
        state, size = clean_state(state)
        now = timezone.now()
        values = {
            "state": state,
            "size": size,
            "message_id": None if message_id is None else parse_id(message_id, "message_id"),
            "epoch": clean_lease_epoch(epoch),
            "saved_at": now,
        }
        with self.db.lock:
            self.db.fence(pk, epoch, now)
            if not self._write(pk, values):
                raise Fenced(conversation_id=str(pk), epoch=epoch)

    def save_many(self, checkpoints: list[dict[str, Any]]) -> set[uuid.UUID]:
        now = timezone.now()
        rows: dict[uuid.UUID, dict[str, Any]] = {}
        for item in checkpoints:
            pk = lookup_id(item["conversation_id"])
            state, size = clean_state(item["state"])
            message_id = item.get("message_id")
            rows[pk] = {
                "state": state,
                "size": size,
                "message_id": None if message_id is None else parse_id(message_id, "message_id"),
                "epoch": clean_lease_epoch(item["epoch"]),
                "saved_at": now,
            }
        with self.db.lock:
            written = set()
            for pk, values in sorted(rows.items()):
                if self.db.holds(pk, values["epoch"]):
                    self.db.supervision[pk].heartbeat_at = now
                    if self._write(pk, values):
                        written.add(pk)
            return set(rows) - written

    def delete(self, conversation_id: Any) -> None:
        pk = lookup_id(conversation_id)
        with self.db.lock:
            self.db.checkpoints.pop(pk, None)

    def read(self, conversation_id: Any) -> AgentCheckpoint | None:
        pk = lookup_id(conversation_id)
        with self.db.lock:
            checkpoint = self.db.checkpoints.get(pk)
            return None if checkpoint is None else clone(checkpoint)
