"""Every contract suite against the in-memory store family, with the database blocked.

Each class runs one shipped suite on a fresh :class:`MemoryDatabase`; an
autouse fixture blocks database access, so a memory store that fell back to
the ORM would fail here rather than pass quietly.
"""

from __future__ import annotations

from typing import Any

import pytest

from agent_persistence.testing.checkpoints import CheckpointStoreContract
from agent_persistence.testing.conversations import ConversationStoreContract
from agent_persistence.testing.events import EventStoreContract
from agent_persistence.testing.family import Stores, memory_stores
from agent_persistence.testing.files import FileStoreContract
from agent_persistence.testing.interrupts import InterruptStoreContract
from agent_persistence.testing.leases import LeaseStoreContract
from agent_persistence.testing.recordings import RecordingStoreContract
from agent_persistence.testing.runs import RunStoreContract
from agent_persistence.testing.supervision import SupervisionStoreContract
from agent_persistence.testing.tasks import TaskStoreContract
from agent_persistence.testing.tickets import TicketStoreContract
from agent_persistence.testing.turns import TurnStoreContract


class MemoryFamily:
    """Run the suite on the in-memory family, with no database."""

    def make_stores(self) -> Stores:
        return memory_stores()

    @pytest.fixture(autouse=True)
    def no_database(self, stores: Any, django_db_blocker: Any) -> Any:
        with django_db_blocker.block():
            yield


class TestMemoryConversationStore(MemoryFamily, ConversationStoreContract):
    pass


class TestMemorySupervisionStore(MemoryFamily, SupervisionStoreContract):
    pass


class TestMemoryCheckpointStore(MemoryFamily, CheckpointStoreContract):
    pass


class TestMemoryRecordingStore(MemoryFamily, RecordingStoreContract):
    pass


class TestMemoryEventStore(MemoryFamily, EventStoreContract):
    pass


class TestMemoryLeaseStore(MemoryFamily, LeaseStoreContract):
    pass


class TestMemoryRunStore(MemoryFamily, RunStoreContract):
    pass


class TestMemoryInterruptStore(MemoryFamily, InterruptStoreContract):
    pass


class TestMemoryTaskStore(MemoryFamily, TaskStoreContract):
    pass


class TestMemoryFileStore(MemoryFamily, FileStoreContract):
    pass


class TestMemoryTurnStore(MemoryFamily, TurnStoreContract):
    pass


class TestMemoryTicketStore(MemoryFamily, TicketStoreContract):
    pass
