"""The artifact store: records of bytes a run produced, each pointing at the blob that holds them.

An artifact belongs to one run: a chat run (and so to its conversation) or a
generation run (and so to its creator, and to its conversation when it has
one). Whoever may read the conversation may read its artifacts; a generation
run's own artifacts are its creator's alone. Only the owner writes.

``save`` writes the bytes to the blob storage first (under the key
``artifacts/<run id>/<artifact id>`` of the owner's tenant), then inserts the
blob row and the artifact row in one transaction that holds the run's
conversation (or generation run) locked; when that fails the bytes are taken
back, so a failed save leaves nothing. An artifact owns its blob: deleting
the artifact, its run or its conversation deletes the blob row in the same
transaction and its bytes once that commits (the receivers in
:mod:`agent_persistence.receivers`), so a rolled-back delete keeps them.
"""

from __future__ import annotations

import uuid
from typing import IO, Any

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from ..exceptions import NotFound
from ..ids import uuid7
from ..models import Artifact, Blob, Conversation, GenerationRun, Run
from ..scope import Scope
from .base import (
    Page,
    check_scope,
    clean_object,
    clean_paging,
    clean_with_total,
    paginate,
    parse_id,
    readable,
    readable_conversation,
    writable_conversation,
)
from .blobs import (
    BlobRead,
    BlobStore,
    ByteRange,
    clean_range,
    discard_content,
    open_blob,
    read_range,
    store_content,
    write_blob,
)
from .files import Content, clean_content_type
from .generations import MAX_METADATA_BYTES, visible_generation_runs, writable_generation_run
from .protocols import ArtifactStoreProtocol
from .rules.artifacts import (  # re-exported: these rules moved to agent_persistence/stores/rules/artifacts.py
    MAX_SOURCE_URL_LENGTH as MAX_SOURCE_URL_LENGTH,
    _source_url as _source_url,
)
from .rules.artifacts import (
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
from .times import clean_caller_time
from .twins import twins_of


def visible_artifacts(scope: Scope) -> Any:
    """The artifacts ``scope`` may read: those of conversations it may read, and its own generations'."""
    return Artifact.objects.filter(
        Q(conversation__in=Conversation.objects.filter(readable(scope)))
        | Q(conversation__isnull=True, tenant=scope.tenant, owner=scope.user)
    )


class RunTarget:
    """The run an artifact goes to: a chat run or a generation run, and the conversation it carries."""

    def __init__(self, run: Run | None = None, generation_run: GenerationRun | None = None) -> None:
        self.run, self.generation_run = run, generation_run

    @property
    def pk(self) -> uuid.UUID:
        return (self.run or self.generation_run).pk  # type: ignore[union-attr]

    @property
    def conversation_id(self) -> uuid.UUID | None:
        return (self.run or self.generation_run).conversation_id  # type: ignore[union-attr]

    def filter(self) -> Q:
        return Q(run_id=self.pk) if self.run is not None else Q(generation_run_id=self.pk)


def readable_target(scope: Scope, run_id: Any) -> RunTarget:
    """The chat run or generation run ``run_id`` if ``scope`` may read it; NotFound("run_not_found") otherwise."""
    check_scope(scope)
    pk = run_pk(run_id)
    run = Run.objects.filter(pk=pk, conversation__in=Conversation.objects.filter(readable(scope))).first()
    if run is not None:
        return RunTarget(run=run)
    generation_run = visible_generation_runs(scope).filter(pk=pk).first()
    if generation_run is not None:
        return RunTarget(generation_run=generation_run)
    raise run_not_found()


def writable_target(scope: Scope, run_id: Any, *, for_update: bool = False) -> RunTarget:
    """The run if ``scope`` owns it (locking its conversation or generation run with ``for_update``).

    A reader gets ConversationNotOwned; anyone else NotFound.
    """
    target = readable_target(scope, run_id)
    if target.run is not None:
        writable_conversation(scope, target.run.conversation_id, for_update=for_update)
        return target
    return RunTarget(generation_run=writable_generation_run(scope, target.pk, for_update=for_update))


class ArtifactStore(twins_of(ArtifactStoreProtocol)):
    """Artifacts through the ORM, their bytes in the blob store; see ``docs/reference/stores/artifacts.md``."""

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
        """Store ``content`` as an artifact of the run (a chat run or a generation run); the new record.

        Everything is checked before the storage is touched; a save that fails
        leaves neither a record nor bytes behind.
        """
        check_scope(scope)
        media_type = clean_content_type(media_type)
        name = clean_artifact_name(name)
        metadata = clean_object(metadata, "metadata", max_bytes=MAX_METADATA_BYTES)
        writable_target(scope, run_id)  # refuse before the bytes are read
        stored_name, size = store_content(content)
        try:
            return self._insert(scope, run_id, stored_name, size, media_type=media_type, name=name, metadata=metadata)
        except BaseException:
            discard_content(stored_name)
            raise

    def _insert(self, scope: Scope, run_id: Any, stored_name: str, size: int, **fields: Any) -> Artifact:
        try:
            with transaction.atomic():
                # Checked again under the lock: the run may have gone while the bytes were written.
                target = writable_target(scope, run_id, for_update=True)
                artifact_id = uuid7()
                blob = write_blob(
                    scope.tenant, artifact_blob_key(target.pk, artifact_id), stored_name, fields["media_type"], size
                )
                return Artifact.objects.create(
                    id=artifact_id,
                    tenant=scope.tenant,
                    owner=scope.user,
                    conversation_id=target.conversation_id,
                    run=target.run,
                    generation_run=target.generation_run,
                    blob=blob,
                    size=size,
                    **fields,
                )
        except IntegrityError:
            # A deferred foreign key fails at commit: the run or its conversation went away.
            raise run_not_found() from None

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
        """Save a record only, under the caller's artifact ``id`` (TanStack's ``artifacts.save(record)``).

        Its bytes are a blob the caller put under ``blob_key`` (in the owner's
        tenant; the record does not own it) or hosted at ``source_url``.
        Insert-if-absent: an id the caller already saved returns the stored
        record unchanged; someone else's is Conflict("artifact_id_taken").
        ``size`` defaults to the blob's when it is there; ``created_at`` (an
        import's) to now.
        """
        check_scope(scope)
        artifact_id = parse_id(id, "id")
        blob_key, source_url = clean_location(blob_key, source_url)
        fields = {
            "media_type": clean_content_type(media_type),
            "name": clean_artifact_name(name),
            "metadata": clean_object(metadata, "metadata", max_bytes=MAX_METADATA_BYTES),
        }
        size = clean_size(size)
        created_at = clean_caller_time(created_at, field="created_at")
        with transaction.atomic():
            target = writable_target(scope, run_id, for_update=True)
            existing = Artifact.objects.filter(pk=artifact_id).first()
            if existing is not None:
                return self._original(scope, existing)
            if size is None and blob_key:
                size = Blob.objects.filter(tenant=scope.tenant, key=blob_key).values_list("size", flat=True).first()
            try:
                with transaction.atomic():
                    return Artifact.objects.create(
                        id=artifact_id, tenant=scope.tenant, owner=scope.user, conversation_id=target.conversation_id,
                        run=target.run, generation_run=target.generation_run, blob=None, blob_key=blob_key,
                        source_url=source_url, size=size, created_at=created_at or timezone.now(), **fields,
                    )
            except IntegrityError:
                existing = Artifact.objects.filter(pk=artifact_id).first()
                if existing is None:
                    raise run_not_found() from None
                return self._original(scope, existing)

    def _original(self, scope: Scope, artifact: Artifact) -> Artifact:
        if (artifact.tenant, artifact.owner) != (scope.tenant, scope.user):
            raise artifact_id_taken()
        return artifact

    def get(self, scope: Scope, artifact_id: Any) -> Artifact:
        """The artifact's record if ``scope`` may read it; NotFound("artifact_not_found") otherwise."""
        check_scope(scope)
        artifact = visible_artifacts(scope).filter(pk=artifact_pk(artifact_id)).select_related("blob").first()
        if artifact is None:
            raise artifact_not_found()
        return artifact

    def open(self, scope: Scope, artifact_id: Any) -> tuple[Artifact, IO[bytes]]:
        """The record and its bytes opened for reading (the caller closes them)."""
        artifact = self.get(scope, artifact_id)
        if artifact.blob_id is None:
            return self._open_record(artifact)
        try:
            return artifact, open_blob(artifact.blob)
        except FileNotFoundError:
            # Deleted (with its bytes) since the record was read, or lost by the storage.
            self.get(scope, artifact.pk)
            raise NotFound("The content of this artifact is missing.", code="artifact_content_missing") from None

    def _open_record(self, artifact: Artifact) -> tuple[Artifact, IO[bytes]]:
        """A record-only artifact's bytes: the blob under its key now (``artifact.blob`` is set to it, unsaved)."""
        if not artifact.blob_key:
            raise content_external(artifact)
        try:
            blob, stream = BlobStore().open(artifact.tenant, artifact.blob_key)
        except NotFound:
            raise content_missing() from None
        artifact.blob = blob
        return artifact, stream

    def read(self, scope: Scope, artifact_id: Any, *, byte_range: ByteRange | None = None) -> BlobRead:
        """The artifact's bytes (only ``byte_range`` of them when given); RangeNotSatisfiable past the end."""
        byte_range = clean_range(byte_range)
        artifact, stream = self.open(scope, artifact_id)
        with stream:
            return read_range(stream, artifact.blob, byte_range)

    def list_by_run(
        self, scope: Scope, run_id: Any, *, limit: Any = None, offset: Any = 0, with_total: Any = None
    ) -> Page[Artifact]:
        """The run's artifacts, oldest first (then by id); counted unless ``with_total`` is False."""
        target = readable_target(scope, run_id)
        limit, offset = clean_paging(limit, offset)
        queryset = Artifact.objects.filter(target.filter()).order_by(*ORDERING)
        return paginate(queryset, limit, offset, with_total=clean_with_total(with_total))

    def list_by_conversation(
        self, scope: Scope, conversation_id: Any, *, limit: Any = None, offset: Any = 0, with_total: Any = None
    ) -> Page[Artifact]:
        """The conversation's artifacts (of its chat runs and of generation runs filed in it), oldest first."""
        conversation = readable_conversation(scope, conversation_id)
        limit, offset = clean_paging(limit, offset)
        queryset = Artifact.objects.filter(conversation=conversation).order_by(*ORDERING)
        return paginate(queryset, limit, offset, with_total=clean_with_total(with_total))

    def delete(self, scope: Scope, artifact_id: Any) -> None:
        """Delete the artifact and its blob; the bytes go once that commits. Owner only."""
        with transaction.atomic():
            artifact = self.get(scope, artifact_id)
            writable_target(scope, artifact.source_run_id)
            _, deleted = Artifact.objects.filter(pk=artifact.pk).delete()
            if not deleted.get(Artifact._meta.label):
                raise artifact_not_found()

    def delete_for_run(self, scope: Scope, run_id: Any) -> int:
        """Delete every artifact of the run (and their blobs); how many. Owner only."""
        with transaction.atomic():
            target = writable_target(scope, run_id)
            _, deleted = Artifact.objects.filter(target.filter()).delete()
            return deleted.get(Artifact._meta.label, 0)
