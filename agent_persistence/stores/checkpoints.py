"""Agent state checkpoints: the working state a resumed turn is revived from.

One blob per conversation, ``{state_key: blob}``, replaced whole by each save
(every ``CHECKPOINT_INTERVAL`` seconds during a turn and once at its end).
Saves are fenced by the producer's epoch; a state whose JSON is larger than
``MAX_STATE_BYTES`` is StorageLimit and nothing is written.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from ..conf import app_settings
from ..exceptions import Fenced, StorageLimit, Validation
from ..models import AgentCheckpoint
from ..scope import Scope
from .base import async_twin, clean_object, json_size, lookup_id, parse_id, readable_conversation
from .fencing import clean_lease_epoch, fence, fence_many, limit_lock_wait, upsert_unless_newer


def clean_state(state: Any) -> tuple[dict[str, Any], int]:
    """The state as JSON round-tripping gives it, and its size in UTF-8 bytes."""
    if not isinstance(state, dict):
        raise Validation("state must be a JSON object.", field="state")
    cleaned = clean_object(state, "state")
    size = json_size(cleaned)
    limit = app_settings.MAX_STATE_BYTES
    if size > limit:
        raise StorageLimit(f"state is larger than {limit} bytes.", field="state", limit=limit, size=size)
    return cleaned, size


class CheckpointStore:
    """The agent checkpoint of each conversation."""

    def load(self, conversation_id: Any) -> dict[str, Any]:
        """The saved state, for the runtime; ``{}`` when none was saved."""
        checkpoint = AgentCheckpoint.objects.filter(pk=lookup_id(conversation_id)).only("state").first()
        return checkpoint.state if checkpoint is not None else {}

    def load_for(self, scope: Scope, conversation_id: Any) -> dict[str, Any]:
        """The saved state if ``scope`` may read the conversation (NotFound otherwise)."""
        return self.load(readable_conversation(scope, conversation_id).pk)

    def save(self, conversation_id: Any, state: dict[str, Any], *, epoch: int, message_id: Any = None) -> None:
        """Replace the conversation's state, fenced by ``epoch``.

        Fenced (and nothing written) when ``epoch`` no longer holds a running
        turn of the conversation or a newer epoch's checkpoint is stored.
        """
        pk = lookup_id(conversation_id)
        state, size = clean_state(state)
        values = {
            "state": state,
            "size": size,
            "message_id": None if message_id is None else parse_id(message_id, "message_id"),
            "epoch": clean_lease_epoch(epoch),
            "saved_at": timezone.now(),
        }
        with transaction.atomic():
            limit_lock_wait()
            fence(pk, epoch)
            if AgentCheckpoint.objects.filter(pk=pk, epoch__lte=epoch).update(**values):
                return
            try:
                with transaction.atomic():
                    AgentCheckpoint.objects.create(conversation_id=pk, **values)
            except IntegrityError:
                # The row exists, so the UPDATE missed it: a newer epoch saved it.
                raise Fenced(conversation_id=str(pk), epoch=epoch) from None

    def save_many(self, checkpoints: list[dict[str, Any]]) -> set[uuid.UUID]:
        """Save a process's due checkpoints in one transaction; return the conversation ids NOT saved.

        Each item has ``conversation_id``, ``state``, ``epoch`` and optionally
        ``message_id``. A fenced one, or one older than the stored checkpoint,
        is reported instead of raised; an invalid or oversized state is
        Validation / StorageLimit and nothing is written.
        """
        now = timezone.now()
        rows: dict[uuid.UUID, dict[str, Any]] = {}
        for item in checkpoints:
            pk = lookup_id(item["conversation_id"])
            state, size = clean_state(item["state"])
            message_id = item.get("message_id")
            rows[pk] = {
                "conversation": pk,
                "state": state,
                "size": size,
                "message_id": None if message_id is None else parse_id(message_id, "message_id"),
                "epoch": clean_lease_epoch(item["epoch"]),
                "saved_at": now,
            }
        if not rows:
            return set()
        with transaction.atomic():
            limit_lock_wait()
            fenced = fence_many([(pk, row["epoch"]) for pk, row in rows.items()], now=now)
            allowed = [row for pk, row in rows.items() if pk not in fenced]
            written = upsert_unless_newer(AgentCheckpoint, allowed) if allowed else set()
        return set(rows) - written

    def delete(self, conversation_id: Any) -> None:
        """Forget the conversation's state; nothing happens when there is none."""
        AgentCheckpoint.objects.filter(pk=lookup_id(conversation_id)).delete()

    def read(self, conversation_id: Any) -> AgentCheckpoint | None:
        """The stored checkpoint (state, size, message_id, epoch, saved_at), unscoped; None when none was saved."""
        return AgentCheckpoint.objects.filter(pk=lookup_id(conversation_id)).first()

    aload = async_twin("load")
    aread = async_twin("read")
    aload_for = async_twin("load_for")
    asave = async_twin("save")
    asave_many = async_twin("save_many")
    adelete = async_twin("delete")
