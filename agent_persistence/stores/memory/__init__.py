"""The in-memory store family: every store kept in one process's memory, for fast tests. Not for production.

Each store here follows the contract of its ORM counterpart (the same contract
suites pass against both) and cleans its input with the same functions, but
keeps its rows in dicts guarded by one re-entrant lock per family
(:class:`~agent_persistence.stores.memory.database.MemoryDatabase`). Nothing
survives the process, nothing is shared between processes, and no database is
touched, which is what makes a host's agent tests fast. A system check
(``agent_persistence.W002``) warns when these stores are configured while
``DEBUG`` is off.

Switch the whole family in settings::

    AGENT_PERSISTENCE = {"STORES": "agent_persistence.stores.memory.family", "AGENTS": {...}}

Stores built from settings share :data:`~agent_persistence.stores.memory.database.DEFAULT_DATABASE`;
:func:`reset_memory_stores` empties it between tests. :data:`MEMORY_STORES`
(the per-store keys, to splat into the setting) is deprecated with those keys;
this module imports no model, so a settings module may still import it.
"""

from __future__ import annotations

_PACKAGE = "agent_persistence.stores.memory"

#: Deprecated: the per-store ``AGENT_PERSISTENCE`` keys that select the in-memory family, to splat
#: into the setting; ``{"STORES": "agent_persistence.stores.memory.family"}`` replaces them.
MEMORY_STORES: dict[str, str] = {
    "TURN_STORE": f"{_PACKAGE}.turns.MemoryTurnStore",
    "CONVERSATION_STORE": f"{_PACKAGE}.conversations.MemoryConversationStore",
    "EVENT_STORE": f"{_PACKAGE}.events.MemoryEventStore",
    "LEASE_STORE": f"{_PACKAGE}.leases.MemoryLeaseStore",
    "FILE_STORE": f"{_PACKAGE}.files.MemoryFileStore",
    "TASK_STORE": f"{_PACKAGE}.tasks.MemoryTaskStore",
    "RUN_STORE": f"{_PACKAGE}.runs.MemoryRunStore",
    "INTERRUPT_STORE": f"{_PACKAGE}.interrupts.MemoryInterruptStore",
    "SUPERVISION_STORE": f"{_PACKAGE}.supervision.MemorySupervisionStore",
    "RECORDING_STORE": f"{_PACKAGE}.recordings.MemoryRecordingStore",
    "CHECKPOINT_STORE": f"{_PACKAGE}.checkpoints.MemoryCheckpointStore",
    "BLOB_STORE": f"{_PACKAGE}.blobs.MemoryBlobStore",
    "ARTIFACT_STORE": f"{_PACKAGE}.artifacts.MemoryArtifactStore",
    "GENERATION_RUN_STORE": f"{_PACKAGE}.generations.MemoryGenerationRunStore",
}


def is_memory_store(import_path: object) -> bool:
    """Whether a store setting's value names (or is) a class of this family."""
    name = import_path if isinstance(import_path, str) else getattr(import_path, "__module__", "")
    return isinstance(name, str) and (name == _PACKAGE or name.startswith(f"{_PACKAGE}."))


def reset_memory_stores() -> None:
    """Empty the shared in-memory database and forget the shared store instances."""
    from .. import reset_stores
    from .database import DEFAULT_DATABASE

    DEFAULT_DATABASE.clear()
    reset_stores()

MEMORY_STORES["ACTIVITY_STORE"] = f"{_PACKAGE}.activities.MemoryActivityStore"
MEMORY_STORES["METADATA_STORE"] = f"{_PACKAGE}.metadata.MemoryMetadataStore"
