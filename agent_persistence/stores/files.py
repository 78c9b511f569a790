"""The file store: file records in the database, their content in a Django storage backend.

A file belongs to a conversation (and, optionally, to one of its messages);
whoever may read the conversation may read its files, only its owner may add
or delete them. Content goes through the storage chosen by
``AGENT_PERSISTENCE["FILE_STORAGE"]`` (the model's ``content`` field uses it),
named after the record id, never after the client's file name.

A save checks everything it can before it touches the storage, reads the
content into a spool while counting it against ``MAX_FILE_BYTES``, writes the
content, then inserts the record under the conversation's write lock. When the
record cannot be written, the content is taken back out of the storage, so a
failed save leaves nothing behind. Content of a deleted record (also one
deleted with its conversation) is removed once the deletion commits, by the
``post_delete`` receiver in :mod:`agent_persistence.receivers`.
"""

from __future__ import annotations

import logging
import uuid
from datetime import datetime
from typing import IO, Any

from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from ..conf import app_settings
from ..exceptions import NotFound, Validation
from ..models import Conversation, Message, StoredFile
from ..scope import Scope
from .base import (
    Page,
    check_scope,
    clean_datetime,
    clean_order,
    clean_paging,
    clean_text,
    keyset_page,
    lookup_id,
    may_read,
    readable,
    readable_conversation,
    writable_conversation,
)
from .protocols import FileStoreProtocol
from .rules.files import (  # re-exported: these rules moved to agent_persistence/stores/rules/files.py
    MAX_CONTENT_TYPE_LENGTH as MAX_CONTENT_TYPE_LENGTH,
    MAX_NAME_LENGTH as MAX_NAME_LENGTH,
    READ_CHUNK_BYTES as READ_CHUNK_BYTES,
    SPOOL_MEMORY_BYTES as SPOOL_MEMORY_BYTES,
    _CONTENT_TYPE as _CONTENT_TYPE,
    _CONTROL_CHARACTERS as _CONTROL_CHARACTERS,
    _TOKEN as _TOKEN,
    _copy_within_limit as _copy_within_limit,
    _known_size as _known_size,
    _refuse_size as _refuse_size,
    _rewind as _rewind,
)
from .rules.files import (
    DEFAULT_CONTENT_TYPE,
    Content,
    clean_content_type,
    clean_file_name,
    clean_sweep_limit,
    spool_content,
)
from .twins import twins_of

logger = logging.getLogger(__name__)


# -- cleaning input ---------------------------------------------------------------------------


# -- reading content --------------------------------------------------------------------------


# -- the store --------------------------------------------------------------------------------


def visible_files(scope: Scope) -> Any:
    """The files of every conversation ``scope`` may read."""
    return StoredFile.objects.filter(conversation__in=Conversation.objects.filter(readable(scope)))


class FileStore(twins_of(FileStoreProtocol)):
    """Files of conversations: records through the ORM, content through Django's storage API."""

    def save(
        self,
        scope: Scope,
        *,
        conversation_id: Any = None,
        message_id: Any = None,
        content: Content,
        name: str,
        content_type: str = DEFAULT_CONTENT_TYPE,
        agent: str | None = None,
        expires_at: datetime | str | None = None,
    ) -> StoredFile:
        """Store ``content`` as a file of the conversation (and message); the new record.

        Everything is checked before the storage is touched; a save that fails
        leaves neither a record nor content behind.
        """
        check_scope(scope)
        name = clean_file_name(name)
        content_type = clean_content_type(content_type)
        agent = clean_text(agent, "agent", max_length=255, null=True)
        expires_at = clean_datetime(expires_at, "expires_at")
        conversation_pk, message_pk = self._target(scope, conversation_id, message_id)
        data, size = spool_content(content, app_settings.MAX_FILE_BYTES)
        record = StoredFile(
            conversation_id=conversation_pk,
            message_id=message_pk,
            uploader=scope.user,
            agent=agent,
            name=name,
            content_type=content_type,
            size=size,
            expires_at=expires_at,
        )
        try:
            record.content.save(name, data, save=False)
        finally:
            data.close()
        try:
            self._insert(scope, record)
        except IntegrityError:
            # A deferred foreign key fails at commit: the conversation or message went away.
            self._discard_content(record)
            raise NotFound("No such conversation or message.") from None
        except BaseException:
            self._discard_content(record)
            raise
        return record

    def get(self, scope: Scope, file_id: Any) -> StoredFile:
        """The file's record, if ``scope`` may read its conversation; otherwise NotFound."""
        check_scope(scope)
        pk = lookup_id(file_id, "file")
        try:
            return visible_files(scope).get(pk=pk)
        except StoredFile.DoesNotExist:
            raise NotFound("No such file.") from None

    def open(self, scope: Scope, file_id: Any) -> IO[bytes]:
        """The file's content, opened for binary reading; the caller closes it."""
        record = self.get(scope, file_id)
        try:
            return record.content.storage.open(record.content.name, "rb")
        except FileNotFoundError:
            logger.warning("The content of file %s is missing from its storage", record.pk)
            raise NotFound("The content of this file is missing.", code="file_content_missing") from None

    def read(self, scope: Scope, file_id: Any) -> bytes:
        """The file's whole content."""
        with self.open(scope, file_id) as stream:
            return stream.read()

    def list(
        self,
        scope: Scope,
        conversation_id: Any,
        *,
        limit: int | None = None,
        offset: int = 0,
        order: str = "asc",
        before: Any = None,
        after: Any = None,
        with_total: bool | None = None,
    ) -> Page[StoredFile]:
        """The conversation's files, oldest first (``order="desc"``: newest first).

        ``before`` / ``after`` are strict file-id cursors on ``(created_at, id)``:
        only files saved before / after that file (the id breaks ties), whatever
        ``order`` shows them in. A cursor must be a file of this conversation,
        else NotFound. A cursor read is uncounted unless ``with_total=True``;
        uncounted, the page is one statement on the ``(conversation, created_at,
        id)`` index, the access check and the cursors' times as its subqueries.
        """
        check_scope(scope)
        pk = lookup_id(conversation_id)
        try:
            limit, offset = clean_paging(limit, offset)
            order = clean_order(order, "asc")
        except Validation:
            readable_conversation(scope, pk)  # a conversation out of reach is NotFound before bad paging
            raise
        ordering = ("created_at", "id") if order == "asc" else ("-created_at", "-id")
        files = StoredFile.objects.filter(conversation_id=pk)
        return keyset_page(
            files.order_by(*ordering),
            key="created_at",
            cursor_rows=files,
            before=before,
            after=after,
            what="file",
            limit=limit,
            offset=offset,
            with_total=with_total,
            access=may_read(scope, pk),
            check_access=lambda: readable_conversation(scope, pk),
        )

    def delete(self, scope: Scope, file_id: Any) -> None:
        """Delete the file: its record now, its content once the deletion commits."""
        with transaction.atomic():
            record = self.get(scope, file_id)
            writable_conversation(scope, record.conversation_id)
            deleted, _ = StoredFile.objects.filter(pk=record.pk).delete()
            if not deleted:
                raise NotFound("No such file.")

    def purge_expired(self, *, before: datetime | str | None = None, limit: int | None = None) -> int:
        """Delete up to ``limit`` files whose ``expires_at`` is at or before ``before``.

        Earliest expiry first; files without ``expires_at`` stay. Returns how
        many were deleted. Several sweepers may run at once: on PostgreSQL each
        claims rows the others have not locked; SQLite serializes them.
        """
        before = clean_datetime(before, "before") or timezone.now()
        limit = clean_sweep_limit(limit)
        with transaction.atomic():
            expired = StoredFile.objects.filter(expires_at__lte=before).order_by("expires_at", "id")
            if connection.features.has_select_for_update_skip_locked:
                expired = expired.select_for_update(skip_locked=True)
            claimed = list(expired.values_list("pk", flat=True)[:limit])
            if not claimed:
                return 0
            _, deleted = StoredFile.objects.filter(pk__in=claimed).delete()
            return deleted.get(StoredFile._meta.label, 0)


    # -- internals ----------------------------------------------------------------------------

    def _target(self, scope: Scope, conversation_id: Any, message_id: Any) -> tuple[uuid.UUID, uuid.UUID | None]:
        """The (conversation, message) a new file goes to, if ``scope`` may write there."""
        if message_id is None:
            if conversation_id is None:
                raise Validation("A file needs a conversation_id or a message_id.", field="conversation_id")
            return writable_conversation(scope, conversation_id).pk, None
        message = self._readable_message(scope, message_id)
        if conversation_id is not None and lookup_id(conversation_id) != message.conversation_id:
            raise NotFound("No such message in this conversation.")
        writable_conversation(scope, message.conversation_id)
        return message.conversation_id, message.pk

    def _readable_message(self, scope: Scope, message_id: Any) -> Message:
        pk = lookup_id(message_id, "message")
        message = (
            Message.objects.filter(pk=pk, conversation__in=Conversation.objects.filter(readable(scope)))
            .only("id", "conversation_id")
            .first()
        )
        if message is None:
            raise NotFound("No such message.")
        return message

    def _insert(self, scope: Scope, record: StoredFile) -> None:
        # The conversation's write lock keeps it (and, by this app's lock order, its
        # messages) in place until the record commits; the checks are repeated under it
        # because the content was written without holding it.
        with transaction.atomic():
            writable_conversation(scope, record.conversation_id, for_update=True)
            if record.message_id is not None:
                if not Message.objects.filter(pk=record.message_id, conversation_id=record.conversation_id).exists():
                    raise NotFound("No such message.")
            try:
                with transaction.atomic():
                    record.save(force_insert=True)
            except IntegrityError:
                raise NotFound("No such conversation or message.") from None

    def _discard_content(self, record: StoredFile) -> None:
        try:
            record.content.storage.delete(record.content.name)
        except OSError:
            logger.warning("Could not take back the content of unsaved file %s", record.pk, exc_info=True)
