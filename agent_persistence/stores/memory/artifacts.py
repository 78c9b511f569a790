"""The in-memory artifact store: artifact records in the family's memory, their bytes in its blobs.

The access rules, the blob key and the listing order are those of the ORM
store (:mod:`agent_persistence.stores.artifacts`); an artifact owns its blob,
and the family's cascades (:meth:`MemoryDatabase.delete_artifacts`) remove
both together.
"""

from __future__ import annotations

import io
from typing import IO, Any

from django.utils import timezone

from ...ids import uuid7
from ...models import Artifact
from ...scope import Scope
from ..protocols import ArtifactStoreProtocol
from ..rules.artifacts import (
    ORDERING,
    artifact_blob_key,
    artifact_id_taken,
    artifact_not_found,
    artifact_pk,
    clean_artifact_name,
    clean_location,
    clean_size,
    content_external,
    content_missing,
    run_not_found,
    run_pk,
)
from ..rules.base import Page, check_scope, clean_object, clean_paging, clean_with_total, parse_id
from ..rules.blobs import BlobRead, ByteRange, clean_range, read_range
from ..rules.files import Content, clean_content_type
from ..rules.generations import MAX_METADATA_BYTES
from ..rules.times import clean_caller_time
from ..twins import twins_of
from .blobs import read_content, write_blob
from .conversations import page_of
from .database import DEFAULT_DATABASE, MemoryDatabase, clone
from .generations import visible_generation_run, writable_generation_run


class MemoryArtifactStore(twins_of(ArtifactStoreProtocol)):
    """Artifacts in a :class:`MemoryDatabase`."""

    def __init__(self, database: MemoryDatabase | None = None) -> None:
        self.db = database or DEFAULT_DATABASE

    # -- access (the caller holds the lock) -------------------------------------------------------

    def _readable_target(self, scope: Scope, run_id: Any) -> tuple[Any, Any]:
        """``(chat run, None)`` or ``(None, generation run)`` if ``scope`` may read it; NotFound otherwise."""
        check_scope(scope)
        pk = run_pk(run_id)
        run = self.db.runs.get(pk)
        conversation = None if run is None else self.db.conversations.get(run.conversation_id)
        if conversation is not None and self.db.may_read(scope, conversation):
            return run, None
        generation_run = visible_generation_run(self.db, scope, pk)
        if generation_run is not None:
            return None, generation_run
        raise run_not_found()

    def _writable_target(self, scope: Scope, run_id: Any) -> tuple[Any, Any]:
        run, generation_run = self._readable_target(scope, run_id)
        if run is not None:
            self.db.writable_conversation(scope, run.conversation_id)
            return run, None
        return None, writable_generation_run(self.db, scope, generation_run.pk)

    def _visible(self, scope: Scope, artifact_id: Any) -> Artifact:
        check_scope(scope)
        artifact = self.db.artifacts.get(artifact_pk(artifact_id))
        if artifact is not None:
            if artifact.conversation_id is None:
                if (artifact.tenant, artifact.owner) == (scope.tenant, scope.user):
                    return artifact
            else:
                conversation = self.db.conversations.get(artifact.conversation_id)
                if conversation is not None and self.db.may_read(scope, conversation):
                    return artifact
        raise artifact_not_found()

    # -- the store ------------------------------------------------------------------------------

    def save(
        self,
        scope: Scope,
        *,
        run_id: Any,
        content: Content,
        media_type: Any = None,
        name: Any = "",
        metadata: Any = None,
    ) -> Artifact:
        check_scope(scope)
        media_type = clean_content_type(media_type)
        name = clean_artifact_name(name)
        metadata = clean_object(metadata, "metadata", max_bytes=MAX_METADATA_BYTES)
        with self.db.lock:
            self._writable_target(scope, run_id)  # refuse before reading the content
        payload = read_content(content)
        with self.db.lock:
            # Checked again: the run may have gone while the content was read.
            run, generation_run = self._writable_target(scope, run_id)
            target = run or generation_run
            artifact_id = uuid7()
            blob = write_blob(self.db, scope.tenant, artifact_blob_key(target.pk, artifact_id), payload, media_type)
            artifact = Artifact(
                id=artifact_id,
                tenant=scope.tenant,
                owner=scope.user,
                conversation_id=target.conversation_id,
                run_id=None if run is None else run.pk,
                generation_run_id=None if generation_run is None else generation_run.pk,
                blob=blob,
                name=name,
                media_type=media_type,
                size=len(payload),
                metadata=metadata,
                created_at=timezone.now(),
            )
            self.db.artifacts[artifact_id] = artifact
            return clone(artifact)

    def save_record(
        self,
        scope: Scope,
        *,
        id: Any,
        run_id: Any,
        blob_key: Any = None,
        source_url: Any = None,
        media_type: Any = None,
        name: Any = "",
        size: Any = None,
        metadata: Any = None,
        created_at: Any = None,
    ) -> Artifact:
        check_scope(scope)
        artifact_id = parse_id(id, "id")
        blob_key, source_url = clean_location(blob_key, source_url)
        media_type = clean_content_type(media_type)
        name = clean_artifact_name(name)
        metadata = clean_object(metadata, "metadata", max_bytes=MAX_METADATA_BYTES)
        size = clean_size(size)
        created_at = clean_caller_time(created_at, field="created_at")
        with self.db.lock:
            run, generation_run = self._writable_target(scope, run_id)
            existing = self.db.artifacts.get(artifact_id)
            if existing is not None:
                if (existing.tenant, existing.owner) != (scope.tenant, scope.user):
                    raise artifact_id_taken()
                return clone(existing)
            target = run or generation_run
            if size is None and blob_key:
                blob = self.db.blobs.get((scope.tenant, blob_key))
                size = None if blob is None else blob.size
            artifact = Artifact(
                id=artifact_id,
                tenant=scope.tenant,
                owner=scope.user,
                conversation_id=target.conversation_id,
                run_id=None if run is None else run.pk,
                generation_run_id=None if generation_run is None else generation_run.pk,
                blob=None,
                blob_key=blob_key,
                source_url=source_url,
                name=name,
                media_type=media_type,
                size=size,
                metadata=metadata,
                created_at=created_at or timezone.now(),
            )
            self.db.artifacts[artifact_id] = artifact
            return clone(artifact)

    def get(self, scope: Scope, artifact_id: Any) -> Artifact:
        with self.db.lock:
            return clone(self._visible(scope, artifact_id))

    def open(self, scope: Scope, artifact_id: Any) -> tuple[Artifact, IO[bytes]]:
        with self.db.lock:
            artifact = clone(self._visible(scope, artifact_id))
            if artifact.blob_id is None:
                if not artifact.blob_key:
                    raise content_external(artifact)
                blob = self.db.blobs.get((artifact.tenant, artifact.blob_key))
                if blob is None:
                    raise content_missing()
                artifact.blob = clone(blob)
            payload = self.db.blob_contents.get(artifact.blob_id)
            if payload is None:
                raise content_missing()
            return artifact, io.BytesIO(payload)

    def read(self, scope: Scope, artifact_id: Any, *, byte_range: ByteRange | None = None) -> BlobRead:
        byte_range = clean_range(byte_range)
        artifact, stream = self.open(scope, artifact_id)
        with stream:
            return read_range(stream, artifact.blob, byte_range)

    def _page(self, rows: list[Artifact], limit: Any, offset: Any, with_total: Any) -> Page[Artifact]:
        limit, offset = clean_paging(limit, offset)
        rows.sort(key=lambda row: tuple(getattr(row, name) for name in ORDERING))
        return page_of(rows, limit, offset, with_total=clean_with_total(with_total))

    def list_by_run(
        self, scope: Scope, run_id: Any, *, limit: Any = None, offset: Any = 0, with_total: Any = None
    ) -> Page[Artifact]:
        with self.db.lock:
            run, generation_run = self._readable_target(scope, run_id)
            if run is not None:
                rows = [row for row in self.db.artifacts.values() if row.run_id == run.pk]
            else:
                rows = [row for row in self.db.artifacts.values() if row.generation_run_id == generation_run.pk]
            return self._page(rows, limit, offset, with_total)

    def list_by_conversation(
        self, scope: Scope, conversation_id: Any, *, limit: Any = None, offset: Any = 0, with_total: Any = None
    ) -> Page[Artifact]:
        with self.db.lock:
            conversation = self.db.readable_conversation(scope, conversation_id)
            rows = [row for row in self.db.artifacts.values() if row.conversation_id == conversation.pk]
            return self._page(rows, limit, offset, with_total)

    def delete(self, scope: Scope, artifact_id: Any) -> None:
        with self.db.lock:
            artifact = self._visible(scope, artifact_id)
            self._writable_target(scope, artifact.source_run_id)
            self.db.delete_artifacts(lambda row: row.pk == artifact.pk)

    def delete_for_run(self, scope: Scope, run_id: Any) -> int:
        with self.db.lock:
            run, generation_run = self._writable_target(scope, run_id)
            if run is not None:
                return self.db.delete_artifacts(lambda row: row.run_id == run.pk)
            return self.db.delete_artifacts(lambda row: row.generation_run_id == generation_run.pk)
