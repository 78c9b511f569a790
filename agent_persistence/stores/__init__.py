"""The stores: the atomic operations of each concern, chosen by import path in settings.

Get a store with the accessor named after it; each returns one shared instance
of the class configured in ``AGENT_PERSISTENCE`` (reset when the setting
changes), typed by its protocol in :mod:`agent_persistence.stores.protocols`::

    from agent_persistence.stores import conversation_store
    conversation = conversation_store().get(scope, conversation_id)

Two families ship: the Django ORM one (the defaults) and an in-memory one for
tests (:data:`agent_persistence.stores.memory.MEMORY_STORES`).
"""

from __future__ import annotations

from typing import Any, cast

from django.core.signals import setting_changed

from ..conf import app_settings
from .protocols import (
    CheckpointStoreProtocol,
    ConversationStoreProtocol,
    EventStoreProtocol,
    FileStoreProtocol,
    InterruptStoreProtocol,
    LeaseStoreProtocol,
    RecordingStoreProtocol,
    RunStoreProtocol,
    SupervisionStoreProtocol,
    TaskStoreProtocol,
    TurnStoreProtocol,
)

_instances: dict[str, Any] = {}


def get_store(setting: str) -> Any:
    """The shared instance of the class named by the ``setting`` key of ``AGENT_PERSISTENCE``."""
    store = _instances.get(setting)
    if store is None:
        store = _instances[setting] = getattr(app_settings, setting)()
    return store


def reset_stores() -> None:
    """Forget the shared instances; the next accessor call builds them from the settings again."""
    _instances.clear()


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


from .protocols import ActivityStoreProtocol, MetadataStoreProtocol  # noqa: E402
# -- blobs, artifacts and generation runs (issue 11) ---------------------------------------------

from .protocols import ArtifactStoreProtocol, BlobStoreProtocol, GenerationRunStoreProtocol  # noqa: E402


def blob_store() -> BlobStoreProtocol:
    return cast(BlobStoreProtocol, get_store("BLOB_STORE"))


def artifact_store() -> ArtifactStoreProtocol:
    return cast(ArtifactStoreProtocol, get_store("ARTIFACT_STORE"))


def generation_run_store() -> GenerationRunStoreProtocol:
    return cast(GenerationRunStoreProtocol, get_store("GENERATION_RUN_STORE"))
