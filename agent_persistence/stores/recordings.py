"""Stream recordings: the latest cumulative snapshot of each conversation's in-flight message.

One record per conversation, overwritten in place by its producer (at most
every ``RECORDING_FLUSH_INTERVAL`` seconds) and followed by readers on any
replica. A write is one upsert statement, so a reader always sees a whole
record, and it is refused when the stored record comes from a newer epoch.
Every write is fenced: it runs in the transaction that proved, with
:func:`~agent_persistence.stores.supervision.fence`, that its epoch still
holds the conversation.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from ..conf import app_settings
from ..exceptions import Validation
from ..models import StreamRecording, SupervisionStatus
from ..scope import Scope
from .base import clean_datetime, lookup_id, parse_id, readable_conversation
from .fencing import fence, fence_many, limit_lock_wait, upsert_unless_newer
from .protocols import RecordingStoreProtocol
from .rules.recordings import (  # re-exported: these rules moved to agent_persistence/stores/rules/recordings.py
    RECORD_KEYS as RECORD_KEYS,
)
from .rules.recordings import (
    RecordingWrite,
    clean_batch,
    clean_record,
)
from .twins import twins_of


def upsert(records: list[RecordingWrite], now: datetime) -> set[uuid.UUID]:
    """Write each record unless a newer epoch's record is stored; return the ids written."""
    rows = [
        {
            "conversation": record.conversation_id,
            "message_id": record.message_id,
            "index": record.index,
            "message": record.message,
            "epoch": record.epoch,
            "updated_at": now,
        }
        for record in records
    ]
    return upsert_unless_newer(StreamRecording, rows)


class RecordingStore(twins_of(RecordingStoreProtocol)):
    """The stream recording of each conversation."""

    def put(self, conversation_id: Any, *, message_id: Any, index: int, message: dict[str, Any], epoch: int) -> bool:
        """Overwrite the conversation's record, fenced by ``epoch``.

        Raises Fenced (and writes nothing) when ``epoch`` no longer holds a
        running turn of the conversation, so the producer stops. Returns False
        (and writes nothing) when the stored record comes from a newer epoch.
        """
        record = clean_record(conversation_id, message_id=message_id, index=index, message=message, epoch=epoch)
        with transaction.atomic():
            limit_lock_wait()
            fence(record.conversation_id, record.epoch)
            return bool(upsert([record], timezone.now()))

    def put_many(self, records: list[dict[str, Any]]) -> set[uuid.UUID]:
        """Flush a process's records in one transaction; return the conversation ids NOT written.

        Each record is a dict with exactly ``conversation_id``, ``message_id``,
        ``index``, ``message`` and ``epoch``; of several for one conversation
        the last is written. A fenced record, or one older than the stored
        record, is reported instead of raised; an invalid one is Validation
        and nothing is written.
        """
        cleaned = clean_batch(records)
        if not cleaned:
            return set()
        now = timezone.now()
        with transaction.atomic():
            limit_lock_wait()
            fenced = fence_many([(record.conversation_id, record.epoch) for record in cleaned], now=now)
            allowed = [record for record in cleaned if record.conversation_id not in fenced]
            written = upsert(allowed, now) if allowed else set()
        return {record.conversation_id for record in cleaned} - written

    def read(self, scope: Scope, conversation_id: Any) -> StreamRecording | None:
        """The record, if ``scope`` may read the conversation (NotFound otherwise); None when absent."""
        conversation = readable_conversation(scope, conversation_id)
        return StreamRecording.objects.filter(pk=conversation.pk).first()

    def read_unscoped(self, conversation_id: Any) -> StreamRecording | None:
        """The record, for the runtime (a follower already checked access)."""
        return StreamRecording.objects.filter(pk=lookup_id(conversation_id)).first()

    def delete(self, conversation_id: Any, *, message_id: Any) -> bool:
        """Remove the record iff it still belongs to ``message_id``; returns whether it did."""
        deleted, _ = StreamRecording.objects.filter(
            pk=lookup_id(conversation_id), message_id=parse_id(message_id, "message_id")
        ).delete()
        return bool(deleted)

    def purge(self, *, finished_before: datetime | None = None, limit: int | None = None) -> int:
        """Delete up to ``limit`` records of finished turns last written before ``finished_before``.

        A record whose conversation has a running turn (alive or dead) stays.
        Defaults: ``RECORDING_RETENTION`` seconds ago (None keeps every record)
        and ``SWEEP_BATCH_SIZE``. Oldest first; returns how many were deleted.
        """
        if finished_before is None:
            if app_settings.RECORDING_RETENTION is None:
                return 0
            finished_before = timezone.now() - timedelta(seconds=app_settings.RECORDING_RETENTION)
        cutoff = clean_datetime(finished_before, "finished_before")
        limit = app_settings.SWEEP_BATCH_SIZE if limit is None else limit
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise Validation("limit must be a whole number, 1 or more.", field="limit")
        purgeable = Q(updated_at__lt=cutoff) & ~Q(
            conversation__supervision__status__in=(SupervisionStatus.RUNNING, SupervisionStatus.HANDED_OFF)
        )
        batch = list(
            StreamRecording.objects.filter(purgeable).order_by("updated_at", "pk").values_list("pk", flat=True)[:limit]
        )
        if not batch:
            return 0
        # The conditions are checked again by the DELETE: a record written since is kept.
        deleted, _ = StreamRecording.objects.filter(purgeable, pk__in=batch).delete()
        return deleted
