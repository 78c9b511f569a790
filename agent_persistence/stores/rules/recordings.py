"""The backend-neutral rules of the recordings concern: what both store families check and build the same way.

The ORM store (:mod:`agent_persistence.stores.recordings`) and its in-memory twin
import these; nothing here reads or writes a table.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from ...conf import app_settings
from ...exceptions import Validation
from .base import clean_object, lookup_id, parse_id
from .fencing import clean_lease_epoch

RECORD_KEYS = frozenset({"conversation_id", "message_id", "index", "message", "epoch"})


@dataclass(frozen=True)
class RecordingWrite:
    """One cleaned record, ready to be written."""

    conversation_id: uuid.UUID
    message_id: uuid.UUID
    index: int
    message: dict[str, Any]
    epoch: int


def clean_record(conversation_id: Any, *, message_id: Any, index: Any, message: Any, epoch: Any) -> RecordingWrite:
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise Validation("index must be a whole number, 0 or more.", field="index")
    if not isinstance(message, dict):
        raise Validation("message must be a JSON object.", field="message")
    return RecordingWrite(
        conversation_id=lookup_id(conversation_id),
        message_id=parse_id(message_id, "message_id"),
        index=index,
        message=clean_object(message, "message", max_bytes=app_settings.MAX_MESSAGE_BYTES),
        epoch=clean_lease_epoch(epoch),
    )


def clean_batch(records: Any) -> list[RecordingWrite]:
    """The batch's records, the last one per conversation (a newer flush replaces an older one)."""
    if not isinstance(records, (list, tuple)):
        raise Validation("records must be a list of records.", field="records")
    latest: dict[uuid.UUID, RecordingWrite] = {}
    for record in records:
        if not isinstance(record, dict) or set(record) != RECORD_KEYS:
            raise Validation(f"Each record must have exactly the keys {', '.join(sorted(RECORD_KEYS))}.", field="records")
        cleaned = clean_record(**record)
        latest[cleaned.conversation_id] = cleaned
    return list(latest.values())
