"""The state of an in-memory store family: every table as a dict, and the one lock that guards them all.

A turn spans stores (a claim raises the conversation's epoch, a fenced write
checks the supervision row, deleting a conversation removes its runs, events,
files...), so the memory stores of one family share one
:class:`MemoryDatabase` and every operation runs under its ``lock`` (a
re-entrant lock: an operation may call another). Holding the lock for the
whole read-decide-write is what makes each operation atomic, the way one
transaction makes an ORM store's.

Records are the models' instances, never saved: a store hands out deep
copies, so a caller that changes what it got changes nothing stored.
"""

from __future__ import annotations

import copy
import threading
import uuid
from typing import Any, TypeVar

from ...exceptions import ConversationNotOwned, Fenced, NotFound
from ...models import (
    AgentCheckpoint,
    Conversation,
    Event,
    Interrupt,
    Lease,
    Message,
    Run,
    StoredFile,
    StreamRecording,
    SupervisionStatus,
    Task,
    TurnSupervision,
)
from ...scope import Scope
from ..rules.base import can_read, check_scope, lookup_id

T = TypeVar("T")

RUNNING = SupervisionStatus.RUNNING.value


def clone(record: T) -> T:
    """A copy the caller may change freely (JSON values included)."""
    return copy.deepcopy(record)


class MemoryDatabase:
    """Every table of one in-memory family, guarded by ``lock``."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.clear()

    def clear(self) -> None:
        """Forget everything (between tests)."""
        with self.lock:
            self.conversations: dict[uuid.UUID, Conversation] = {}
            self.messages: dict[uuid.UUID, Message] = {}
            self.runs: dict[uuid.UUID, Run] = {}
            self.interrupts: dict[uuid.UUID, Interrupt] = {}
            self.events: dict[uuid.UUID, list[Event]] = {}
            self.event_ids = 0
            self.leases: dict[tuple[str, str], Lease] = {}
            self.lease_ids = 0
            self.files: dict[uuid.UUID, StoredFile] = {}
            self.file_contents: dict[uuid.UUID, bytes] = {}
            self.tasks: dict[uuid.UUID, Task] = {}
            self.supervision: dict[uuid.UUID, TurnSupervision] = {}
            self.recordings: dict[uuid.UUID, StreamRecording] = {}
            self.checkpoints: dict[uuid.UUID, AgentCheckpoint] = {}
            self.activities: dict[uuid.UUID, list[Any]] = {}  # conversation id -> its rows, in list order
            self.metadata: dict[tuple[str, str, str], Any] = {}  # (tenant, namespace, key) -> MetadataEntry
            # Blobs by (tenant, key), their bytes by blob id; artifacts and generation runs by id.
            self.blobs: dict[tuple[str, str], Any] = {}
            self.blob_contents: dict[uuid.UUID, bytes] = {}
            self.artifacts: dict[uuid.UUID, Any] = {}
            self.generation_runs: dict[uuid.UUID, Any] = {}
            self.tickets: dict[uuid.UUID, Any] = {}  # websocket tickets by id

    # -- conversation access (the rules of stores.base, on these dicts) ---------------------------

    def readable_conversation(self, scope: Scope, conversation_id: Any) -> Conversation:
        """The stored conversation if ``scope`` may read it; NotFound otherwise, whether or not it exists."""
        check_scope(scope)
        conversation = self.conversations.get(lookup_id(conversation_id))
        if conversation is None or not self.may_read(scope, conversation):
            raise NotFound("No such conversation.")
        return conversation

    def writable_conversation(self, scope: Scope, conversation_id: Any) -> Conversation:
        """The stored conversation if ``scope`` owns it; ConversationNotOwned for a reader, else NotFound."""
        conversation = self.readable_conversation(scope, conversation_id)
        if conversation.owner != scope.user:
            raise ConversationNotOwned()
        return conversation

    may_read = staticmethod(can_read)

    # -- fencing ----------------------------------------------------------------------------------

    def holds(self, conversation_pk: uuid.UUID, epoch: int) -> bool:
        row = self.supervision.get(conversation_pk)
        return row is not None and row.epoch == epoch and row.status == RUNNING

    def fence(self, conversation_pk: uuid.UUID, epoch: int, now: Any) -> None:
        """Raise Fenced unless ``epoch`` holds a running turn; stamp its heartbeat (a writer is alive)."""
        if not self.holds(conversation_pk, epoch):
            raise Fenced(conversation_id=str(conversation_pk), epoch=epoch)
        self.supervision[conversation_pk].heartbeat_at = now

    # -- cascades ---------------------------------------------------------------------------------

    def delete_conversation(self, pk: uuid.UUID) -> None:
        """Remove the conversation and everything it holds, as the ORM's cascades do."""
        self.conversations.pop(pk, None)
        for table in (self.messages, self.runs, self.interrupts, self.tasks):
            for key in [key for key, row in table.items() if row.conversation_id == pk]:
                del table[key]
        for key in [key for key, row in self.files.items() if row.conversation_id == pk]:
            del self.files[key]
            self.file_contents.pop(key, None)
        for table in (self.events, self.supervision, self.recordings, self.checkpoints, self.activities):
            table.pop(pk, None)
        for key in [key for key, row in self.generation_runs.items() if row.conversation_id == pk]:
            del self.generation_runs[key]
        self.delete_artifacts(
            lambda row: row.conversation_id == pk or (row.generation_run_id is not None and row.generation_run_id not in self.generation_runs)
        )

    def delete_blob(self, tenant: str, key: str) -> bool:
        """Remove a blob and its bytes, and the artifact made of it; whether it existed."""
        blob = self.blobs.pop((tenant, key), None)
        if blob is None:
            return False
        self.blob_contents.pop(blob.pk, None)
        for artifact_pk in [pk for pk, row in self.artifacts.items() if row.blob_id == blob.pk]:
            del self.artifacts[artifact_pk]
        return True

    def delete_artifacts(self, doomed: Any) -> int:
        """Remove the artifacts ``doomed(row)`` picks, with their blobs; how many."""
        picked = [row for row in self.artifacts.values() if doomed(row)]
        for row in picked:
            del self.artifacts[row.pk]
            if row.blob_id is not None:  # a record-only artifact owns no blob
                self.delete_blob(row.tenant, row.blob.key)
        return len(picked)

    def delete_message(self, pk: uuid.UUID) -> None:
        """Remove a message; its files stay, detached from it."""
        self.messages.pop(pk, None)
        for record in self.files.values():
            if record.message_id == pk:
                record.message_id = None


#: The family's state when stores are built from settings (``MemoryConversationStore()`` and so on).
DEFAULT_DATABASE = MemoryDatabase()
