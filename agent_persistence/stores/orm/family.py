"""The Django ORM family (the default of ``AGENT_PERSISTENCE["STORES"]``): every store over the project's database.

Files and blobs keep their bytes in the storages named by ``FILE_STORAGE`` and
``BLOB_STORAGE``; the test hooks of :class:`~agent_persistence.stores.family.Stores`
look there.
"""

from __future__ import annotations

from typing import Any

from ...conf import app_settings
from ..family import Stores


def stores() -> Stores:
    """A new instance of every ORM store (they share the database, nothing else)."""
    from ..activities import ActivityStore
    from ..artifacts import ArtifactStore
    from ..blobs import BlobStore
    from ..checkpoints import CheckpointStore
    from ..conversations import ConversationStore
    from ..events import EventStore
    from ..files import FileStore
    from ..generations import GenerationRunStore
    from ..interrupts import InterruptStore
    from ..leases import LeaseStore
    from ..metadata import MetadataStore
    from ..recordings import RecordingStore
    from ..runs import RunStore
    from ..supervision import SupervisionStore
    from ..tasks import TaskStore
    from ..tickets import TicketStore
    from ..turns import TurnStore

    return Stores(
        conversations=ConversationStore(),
        events=EventStore(),
        leases=LeaseStore(),
        files=FileStore(),
        tasks=TaskStore(),
        runs=RunStore(),
        interrupts=InterruptStore(),
        supervision=SupervisionStore(),
        recordings=RecordingStore(),
        checkpoints=CheckpointStore(),
        turns=TurnStore(),
        across_processes=True,
        content_exists=_content_in_storage,
        stored_contents=_names_in_storage,
        lose_content=_delete_from_storage,
        activities=ActivityStore(),
        metadata=MetadataStore(),
        blobs=BlobStore(),
        artifacts=ArtifactStore(),
        generations=GenerationRunStore(),
        stored_blobs=_blob_names_in_storage,
        tickets=TicketStore(),
    )


def _file_storage() -> Any:
    from ...models import StoredFile

    return StoredFile._meta.get_field("content").storage


def _content_in_storage(record: Any) -> bool:
    return bool(record.content.name) and _file_storage().exists(record.content.name)


def _names_under(storage: Any, folder: str) -> set[str]:
    """Every object name below ``folder`` of ``storage``."""
    names: set[str] = set()
    folders = [folder]
    while folders:
        folder = folders.pop()
        try:
            subfolders, files = storage.listdir(folder)
        except FileNotFoundError:
            continue
        path = f"{folder}/" if folder else ""
        folders.extend(path + name for name in subfolders)
        names.update(path + name for name in files)
    return names


def _names_in_storage() -> set[str]:
    """Every content name under the upload folder of the file storage."""
    prefix = app_settings.FILE_UPLOAD_TO.split("%", 1)[0]
    return _names_under(_file_storage(), prefix.rsplit("/", 1)[0] if "/" in prefix else "")


def _delete_from_storage(record: Any) -> None:
    _file_storage().delete(record.content.name)


def _blob_names_in_storage() -> set[str]:
    """Every object name under the blob upload folder of the blob storage."""
    from ...models.artifacts import blob_storage

    return _names_under(blob_storage(), app_settings.BLOB_UPLOAD_TO.split("%", 1)[0].rstrip("/"))
