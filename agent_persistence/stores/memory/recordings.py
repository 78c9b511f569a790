"""The in-memory recording store: each conversation's latest snapshot, fenced by the producer's epoch."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from ...conf import app_settings
from ...exceptions import Validation
from ...models import StreamRecording
from ...scope import Scope
from ..protocols import RecordingStoreProtocol
from ..rules.base import clean_datetime, lookup_id, parse_id
from ..rules.recordings import RecordingWrite, clean_batch, clean_record
from ..rules.supervision import OPEN_STATUSES
from ..twins import twins_of
from .database import DEFAULT_DATABASE, MemoryDatabase, clone


class MemoryRecordingStore(twins_of(RecordingStoreProtocol)):
    """The stream recording of each conversation, in a :class:`MemoryDatabase`."""

    def __init__(self, database: MemoryDatabase | None = None) -> None:
        self.db = database or DEFAULT_DATABASE

    def _upsert(self, record: RecordingWrite, now: datetime) -> bool:
        """Write the record unless a newer epoch's is stored (the caller holds the lock)."""
        stored = self.db.recordings.get(record.conversation_id)
        if stored is not None and stored.epoch > record.epoch:
            return False
        self.db.recordings[record.conversation_id] = StreamRecording(
            conversation_id=record.conversation_id,
            message_id=record.message_id,
            index=record.index,
            message=record.message,
            epoch=record.epoch,
            updated_at=now,
        )
        return True

    def put(self, conversation_id: Any, *, message_id: Any, index: int, message: dict[str, Any], epoch: int) -> bool:
        record = clean_record(conversation_id, message_id=message_id, index=index, message=message, epoch=epoch)
        now = timezone.now()
        with self.db.lock:
            self.db.fence(record.conversation_id, record.epoch, now)
            return self._upsert(record, now)

    def put_many(self, records: list[dict[str, Any]]) -> set[uuid.UUID]:
        cleaned = clean_batch(records)
        now = timezone.now()
        with self.db.lock:
            written = set()
            for record in cleaned:
                if self.db.holds(record.conversation_id, record.epoch):
                    self.db.supervision[record.conversation_id].heartbeat_at = now
                    if self._upsert(record, now):
                        written.add(record.conversation_id)
            return {record.conversation_id for record in cleaned} - written

    def read(self, scope: Scope, conversation_id: Any) -> StreamRecording | None:
        with self.db.lock:
            conversation = self.db.readable_conversation(scope, conversation_id)
            record = self.db.recordings.get(conversation.pk)
            return None if record is None else clone(record)

    def read_unscoped(self, conversation_id: Any) -> StreamRecording | None:
        pk = lookup_id(conversation_id)
        with self.db.lock:
            record = self.db.recordings.get(pk)
            return None if record is None else clone(record)

    def delete(self, conversation_id: Any, *, message_id: Any) -> bool:
        pk = lookup_id(conversation_id)
        message_id = parse_id(message_id, "message_id")
        with self.db.lock:
            record = self.db.recordings.get(pk)
            if record is None or record.message_id != message_id:
                return False
            del self.db.recordings[pk]
            return True

    def purge(self, *, finished_before: datetime | None = None, limit: int | None = None) -> int:
        if finished_before is None:
            if app_settings.RECORDING_RETENTION is None:
                return 0
            finished_before = timezone.now() - timedelta(seconds=app_settings.RECORDING_RETENTION)
        cutoff = clean_datetime(finished_before, "finished_before")
        limit = app_settings.SWEEP_BATCH_SIZE if limit is None else limit
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise Validation("limit must be a whole number, 1 or more.", field="limit")
        with self.db.lock:
            purgeable = [
                record
                for pk, record in self.db.recordings.items()
                if record.updated_at < cutoff
                and not (pk in self.db.supervision and self.db.supervision[pk].status in OPEN_STATUSES)
            ]
            purgeable.sort(key=lambda record: (record.updated_at, record.pk))
            for record in purgeable[:limit]:
                del self.db.recordings[record.pk]
            return len(purgeable[:limit])
