"""The in-memory family (``AGENT_PERSISTENCE["STORES"] = "agent_persistence.stores.memory.family"``), for tests.

Every store of :func:`stores` shares one :class:`~.database.MemoryDatabase`:
the process-wide :data:`~.database.DEFAULT_DATABASE` unless another is given
(the contract suites give each test a fresh one).
"""

from __future__ import annotations

from ..family import Stores
from .database import DEFAULT_DATABASE, MemoryDatabase


def stores(database: MemoryDatabase | None = None) -> Stores:
    """Every in-memory store, over ``database`` (default: the shared :data:`DEFAULT_DATABASE`)."""
    from .activities import MemoryActivityStore
    from .artifacts import MemoryArtifactStore
    from .blobs import MemoryBlobStore
    from .checkpoints import MemoryCheckpointStore
    from .conversations import MemoryConversationStore
    from .events import MemoryEventStore
    from .files import MemoryFileStore
    from .generations import MemoryGenerationRunStore
    from .interrupts import MemoryInterruptStore
    from .leases import MemoryLeaseStore
    from .metadata import MemoryMetadataStore
    from .recordings import MemoryRecordingStore
    from .runs import MemoryRunStore
    from .supervision import MemorySupervisionStore
    from .tasks import MemoryTaskStore
    from .tickets import MemoryTicketStore
    from .turns import MemoryTurnStore

    db = database if database is not None else DEFAULT_DATABASE
    return Stores(
        conversations=MemoryConversationStore(db),
        events=MemoryEventStore(db),
        leases=MemoryLeaseStore(db),
        files=MemoryFileStore(db),
        tasks=MemoryTaskStore(db),
        runs=MemoryRunStore(db),
        interrupts=MemoryInterruptStore(db),
        supervision=MemorySupervisionStore(db),
        recordings=MemoryRecordingStore(db),
        checkpoints=MemoryCheckpointStore(db),
        across_processes=False,
        content_exists=lambda record: record.pk in db.file_contents,
        stored_contents=lambda: set(db.file_contents),
        lose_content=lambda record: db.file_contents.pop(record.pk, None),
        turns=MemoryTurnStore(db),
        activities=MemoryActivityStore(db),
        metadata=MemoryMetadataStore(db),
        blobs=MemoryBlobStore(db),
        artifacts=MemoryArtifactStore(db),
        generations=MemoryGenerationRunStore(db),
        stored_blobs=lambda: set(db.blob_contents),
        tickets=MemoryTicketStore(db),
    )
