"""The stores: the atomic operations of each concern, served by the family that ``STORES`` names.

Get a store with the accessor named after it; each returns the store of one
shared instance of the family configured in ``AGENT_PERSISTENCE["STORES"]``
(built again when the setting changes), typed by its protocol in
:mod:`agent_persistence.stores.protocols`::

    from agent_persistence.stores import conversation_store
    conversation = conversation_store().get(scope, conversation_id)

Two families ship: the Django ORM one (``agent_persistence.stores.orm.family``,
the default) and an in-memory one for tests
(``agent_persistence.stores.memory.family``); see
:mod:`agent_persistence.stores.family`. The per-store keys (``TURN_STORE``
...) still replace one store each, with a ``DeprecationWarning``.
"""

from __future__ import annotations

import warnings
from typing import Any, cast

from django.core.signals import setting_changed

from ..conf import app_settings
from .family import SLOT_BY_SETTING, Stores, family_builder
from .protocols import (
    ActivityStoreProtocol,
    ArtifactStoreProtocol,
    BlobStoreProtocol,
    CheckpointStoreProtocol,
    ConversationStoreProtocol,
    EventStoreProtocol,
    FileStoreProtocol,
    GenerationRunStoreProtocol,
    InterruptStoreProtocol,
    LeaseStoreProtocol,
    MetadataStoreProtocol,
    RecordingStoreProtocol,
    RunStoreProtocol,
    SupervisionStoreProtocol,
    TaskStoreProtocol,
    TicketStoreProtocol,
    TurnStoreProtocol,
)

_instances: dict[str, Any] = {}
_family: list[Stores] = []


def configured_family() -> Stores:
    """The shared instance of the family that ``AGENT_PERSISTENCE["STORES"]`` names.

    A bad value raises :class:`~agent_persistence.stores.family.FamilyError`
    (system check ``agent_persistence.E011`` says so at startup).
    """
    if not _family:
        _family.append(family_builder(app_settings.STORES)())
    return _family[0]


def deprecated_store_keys() -> list[str]:
    """The per-store keys (``TURN_STORE`` ...) the project still sets; ``STORES`` replaces them."""
    return sorted(key for key in SLOT_BY_SETTING if app_settings.user_settings.get(key) is not None)


def get_store(setting: str) -> Any:
    """The shared store of a ``*_STORE`` key: the configured family's, or the class the deprecated key names.

    Any other key (``OAUTH_REPOSITORY``) is an import string: the shared
    instance of the class it names.
    """
    store = _instances.get(setting)
    if store is None:
        slot = SLOT_BY_SETTING.get(setting)
        if slot is None:
            store = getattr(app_settings, setting)()
        elif app_settings.user_settings.get(setting) is not None:
            warnings.warn(
                f"AGENT_PERSISTENCE[{setting!r}] is deprecated: name the whole family in "
                "AGENT_PERSISTENCE['STORES'] (docs/reference/settings.md#stores).",
                DeprecationWarning,
                stacklevel=3,
            )
            store = getattr(app_settings, setting)()
        else:
            store = getattr(configured_family(), slot.name)
        _instances[setting] = store
    return store


def reset_stores() -> None:
    """Forget the shared instances; the next accessor call builds them from the settings again."""
    _instances.clear()
    _family.clear()


def _reset_on_setting_changed(*, setting: str, **kwargs: Any) -> None:
    if setting == "AGENT_PERSISTENCE":
        reset_stores()


setting_changed.connect(_reset_on_setting_changed)


def turn_store() -> TurnStoreProtocol:
    return cast(TurnStoreProtocol, get_store("TURN_STORE"))


def conversation_store() -> ConversationStoreProtocol:
    return cast(ConversationStoreProtocol, get_store("CONVERSATION_STORE"))


def event_store() -> EventStoreProtocol:
    return cast(EventStoreProtocol, get_store("EVENT_STORE"))


def lease_store() -> LeaseStoreProtocol:
    return cast(LeaseStoreProtocol, get_store("LEASE_STORE"))


def file_store() -> FileStoreProtocol:
    return cast(FileStoreProtocol, get_store("FILE_STORE"))


def task_store() -> TaskStoreProtocol:
    return cast(TaskStoreProtocol, get_store("TASK_STORE"))


def run_store() -> RunStoreProtocol:
    return cast(RunStoreProtocol, get_store("RUN_STORE"))


def interrupt_store() -> InterruptStoreProtocol:
    return cast(InterruptStoreProtocol, get_store("INTERRUPT_STORE"))


def supervision_store() -> SupervisionStoreProtocol:
    return cast(SupervisionStoreProtocol, get_store("SUPERVISION_STORE"))


def recording_store() -> RecordingStoreProtocol:
    return cast(RecordingStoreProtocol, get_store("RECORDING_STORE"))


def checkpoint_store() -> CheckpointStoreProtocol:
    return cast(CheckpointStoreProtocol, get_store("CHECKPOINT_STORE"))


def activity_store() -> ActivityStoreProtocol:
    return cast(ActivityStoreProtocol, get_store("ACTIVITY_STORE"))


def metadata_store() -> MetadataStoreProtocol:
    return cast(MetadataStoreProtocol, get_store("METADATA_STORE"))


def blob_store() -> BlobStoreProtocol:
    return cast(BlobStoreProtocol, get_store("BLOB_STORE"))


def artifact_store() -> ArtifactStoreProtocol:
    return cast(ArtifactStoreProtocol, get_store("ARTIFACT_STORE"))


def generation_run_store() -> GenerationRunStoreProtocol:
    return cast(GenerationRunStoreProtocol, get_store("GENERATION_RUN_STORE"))



def ticket_store() -> TicketStoreProtocol:
    """The configured family's websocket ticket store (a slot with no deprecated per-store key)."""
    return cast(TicketStoreProtocol, configured_family().tickets)
