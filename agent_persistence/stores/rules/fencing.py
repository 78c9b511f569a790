"""The backend-neutral rules of the fencing concern: what both store families check and build the same way.

The ORM store (:mod:`agent_persistence.stores.fencing`) and its in-memory twin
import these; nothing here reads or writes a table.
"""

from __future__ import annotations

import uuid
from typing import Any

from ...exceptions import Validation
from .base import MAX_EPOCH, parse_id


def clean_lease_epoch(value: Any, field_name: str = "epoch", *, minimum: int = 1) -> int:
    """A required epoch; claims start at 1, so a producer's epoch is never 0."""
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= MAX_EPOCH:
        raise Validation(f"{field_name} must be a whole number from {minimum} to {MAX_EPOCH}.", field=field_name)
    return value


def clean_entries(entries: Any) -> list[tuple[uuid.UUID, int]]:
    """Distinct ``(conversation_id, epoch)`` pairs, sorted so batches lock rows in one order."""
    if not isinstance(entries, (list, tuple, set, frozenset)):
        raise Validation("entries must be a list of (conversation_id, epoch) pairs.", field="entries")
    pairs = set()
    for entry in entries:
        if not isinstance(entry, (list, tuple)) or len(entry) != 2:
            raise Validation("entries must be a list of (conversation_id, epoch) pairs.", field="entries")
        pairs.add((parse_id(entry[0], "conversation_id"), clean_lease_epoch(entry[1])))
    return sorted(pairs)
