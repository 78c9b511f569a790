"""A store family: one instance of every store of one backend, chosen as a whole by the ``STORES`` setting.

A family module (``agent_persistence.stores.orm.family``,
``agent_persistence.stores.memory.family``, or a project's own) defines
``stores()``, which returns a :class:`Stores`: one instance of every store,
sharing whatever state the backend keeps. ``AGENT_PERSISTENCE["STORES"]``
names that module; the accessors of :mod:`agent_persistence.stores` hand out
its stores, and the contract suites of :mod:`agent_persistence.testing` run
against it.

:data:`SLOTS` is the one list of the stores a family holds: each one's
attribute on :class:`Stores`, its protocol, the ``AGENT_PERSISTENCE`` key that
chose it before ``STORES`` (deprecated), and whether it may come from another
family than the rest. This module imports no model, so a settings module may
import it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module
from typing import Any

from django.utils.module_loading import import_string

from . import protocols


@dataclass(frozen=True)
class Slot:
    """One store of a family.

    ``setting`` is the deprecated ``AGENT_PERSISTENCE`` key that chooses this
    store alone (None for a store added after ``STORES``); ``alone`` says
    whether it may come from another family than the others (a lease store
    keeps no row another store reads; the turn aggregate's stores write and
    fence each other's rows in one transaction). ``default`` is the import
    path of the store class a family that leaves the slot empty gets (a
    family written before the slot existed keeps working); without one an
    empty slot is system check ``agent_persistence.E011``.
    """

    name: str
    setting: str | None
    protocol: type
    alone: bool = False
    default: str | None = None


SLOTS: tuple[Slot, ...] = (
    Slot("turns", "TURN_STORE", protocols.TurnStoreProtocol),
    Slot("conversations", "CONVERSATION_STORE", protocols.ConversationStoreProtocol),
    Slot("events", "EVENT_STORE", protocols.EventStoreProtocol),
    Slot("runs", "RUN_STORE", protocols.RunStoreProtocol),
    Slot("interrupts", "INTERRUPT_STORE", protocols.InterruptStoreProtocol),
    Slot("supervision", "SUPERVISION_STORE", protocols.SupervisionStoreProtocol),
    Slot("recordings", "RECORDING_STORE", protocols.RecordingStoreProtocol),
    Slot("checkpoints", "CHECKPOINT_STORE", protocols.CheckpointStoreProtocol),
    Slot("activities", "ACTIVITY_STORE", protocols.ActivityStoreProtocol),
    Slot("artifacts", "ARTIFACT_STORE", protocols.ArtifactStoreProtocol),
    Slot("generations", "GENERATION_RUN_STORE", protocols.GenerationRunStoreProtocol),
    Slot("leases", "LEASE_STORE", protocols.LeaseStoreProtocol, alone=True),
    Slot("files", "FILE_STORE", protocols.FileStoreProtocol, alone=True),
    Slot("tasks", "TASK_STORE", protocols.TaskStoreProtocol, alone=True),
    Slot("blobs", "BLOB_STORE", protocols.BlobStoreProtocol, alone=True),
    Slot("metadata", "METADATA_STORE", protocols.MetadataStoreProtocol, alone=True),
    Slot("tickets", None, protocols.TicketStoreProtocol, alone=True, default="agent_persistence.stores.tickets.TicketStore"),
)

#: The slots by their deprecated ``AGENT_PERSISTENCE`` key.
SLOT_BY_SETTING: dict[str, Slot] = {slot.setting: slot for slot in SLOTS if slot.setting}

#: The deprecated ``AGENT_PERSISTENCE`` keys that chose one store each (``STORES`` replaces them).
STORE_SETTINGS: tuple[str, ...] = tuple(SLOT_BY_SETTING)

#: The default of ``AGENT_PERSISTENCE["STORES"]``.
ORM_FAMILY = "agent_persistence.stores.orm.family"
MEMORY_FAMILY = "agent_persistence.stores.memory.family"


@dataclass
class Stores:
    """One instance of every store of a backend family; they share whatever state the family keeps.

    ``across_processes`` says whether the family's state is shared by forked
    processes (a database is; a process's memory is not): race tests that need
    several processes run their workers as threads when it is False.
    ``content_exists`` tells whether a file record's content is still stored,
    ``stored_contents`` names every content the backend keeps (to prove a
    failed save left none behind) and ``lose_content`` removes a record's
    content behind the store's back: what the file store cannot show through
    its own API, since an orphan is by definition out of its reach.
    ``stored_blobs`` names every blob's bytes the backend keeps. A family that
    leaves ``tickets`` empty (one written before the ticket store was a slot)
    gets the ORM :class:`~agent_persistence.stores.tickets.TicketStore`, as
    every family did before.
    """

    conversations: Any
    events: Any
    leases: Any
    files: Any
    tasks: Any
    runs: Any
    interrupts: Any
    supervision: Any
    recordings: Any
    checkpoints: Any
    turns: Any = None
    across_processes: bool = True
    content_exists: Callable[[Any], bool] = lambda record: False
    stored_contents: Callable[[], set[Any]] = set
    lose_content: Callable[[Any], None] = lambda record: None
    activities: Any = None
    metadata: Any = None
    blobs: Any = None
    artifacts: Any = None
    generations: Any = None
    stored_blobs: Callable[[], set[Any]] = set
    tickets: Any = None

    def __post_init__(self) -> None:
        # A family written before a slot existed leaves it empty: it gets the slot's default store.
        for slot in SLOTS:
            if slot.default and getattr(self, slot.name) is None:
                setattr(self, slot.name, import_string(slot.default)())

    def run_in_processes(self, count: int, target: Callable[[int], Any], *, timeout: float = 120.0) -> list[Any]:
        """``target(i)`` in ``count`` OS processes, or threads when the family lives in one process's memory."""
        from ..testing.concurrency import run_in_processes, run_in_threads

        if self.across_processes:
            return run_in_processes(count, target, timeout=timeout)
        return run_in_threads(count, target, timeout=timeout)


class FamilyError(Exception):
    """``STORES`` names no usable family; the message says why (system check ``agent_persistence.E011``)."""


def family_builder(path: Any) -> Callable[..., Stores]:
    """The ``stores`` function of the family module ``path`` (or ``path`` itself when it is a callable).

    Raises :class:`FamilyError` when the module does not import or defines no ``stores()``.
    """
    if callable(path):
        return path
    if not isinstance(path, str) or not path:
        raise FamilyError(f"it must be the import path of a store family module, not {path!r}")
    try:
        module = import_module(path)
    except ImportError as exc:
        raise FamilyError(f"{path!r} does not import: {exc}") from exc
    builder = getattr(module, "stores", None)
    if not callable(builder):
        raise FamilyError(f"{path!r} defines no stores() function returning a Stores")
    return builder


def problems_of(family: Any) -> list[str]:
    """What is wrong with what a family module's ``stores()`` returned (empty: nothing)."""
    if not isinstance(family, Stores):
        return [f"its stores() returned {type(family).__name__}, not agent_persistence.stores.family.Stores"]
    found = []
    for slot in SLOTS:
        store = getattr(family, slot.name)
        if store is None:
            found.append(f"it has no {slot.name} store")
        elif not isinstance(store, slot.protocol):
            found.append(f"its {slot.name} store ({type(store).__qualname__}) does not follow {slot.protocol.__name__}")
    return found
