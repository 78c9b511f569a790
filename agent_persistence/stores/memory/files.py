"""The in-memory file store: file records and their bytes, both in the family's memory.

Content is read with the ORM store's :func:`~agent_persistence.stores.files.spool_content`,
so the size limit and the accepted sources are the same; the bytes live in
:attr:`MemoryDatabase.file_contents` (no Django storage is touched), and a
record's ``content`` carries the name the ORM store would give it.
"""

from __future__ import annotations

import io
import uuid
from datetime import datetime
from typing import IO, Any

from django.utils import timezone

from ...conf import app_settings
from ...exceptions import NotFound, Validation
from ...ids import uuid7
from ...models import StoredFile
from ...scope import Scope
from ..protocols import FileStoreProtocol
from ..rules.base import (
    Page,
    check_scope,
    clean_datetime,
    clean_order,
    clean_paging,
    clean_text,
    clean_with_total,
    lookup_id,
)
from ..rules.files import (
    DEFAULT_CONTENT_TYPE,
    Content,
    clean_content_type,
    clean_file_name,
    clean_sweep_limit,
    spool_content,
)
from ..twins import twins_of
from .conversations import page_of, past_cursors
from .database import DEFAULT_DATABASE, MemoryDatabase, clone


class MemoryFileStore(twins_of(FileStoreProtocol)):
    """Files of conversations in a :class:`MemoryDatabase`."""

    def __init__(self, database: MemoryDatabase | None = None) -> None:
        self.db = database or DEFAULT_DATABASE

    def _target(self, scope: Scope, conversation_id: Any, message_id: Any) -> tuple[uuid.UUID, uuid.UUID | None]:
        """The (conversation, message) a new file goes to, if ``scope`` may write there (the caller holds the lock)."""
        if message_id is None:
            if conversation_id is None:
                raise Validation("A file needs a conversation_id or a message_id.", field="conversation_id")
            return self.db.writable_conversation(scope, conversation_id).pk, None
        message = self.db.messages.get(lookup_id(message_id, "message"))
        conversation = None if message is None else self.db.conversations.get(message.conversation_id)
        if conversation is None or not self.db.may_read(scope, conversation):
            raise NotFound("No such message.")
        if conversation_id is not None and lookup_id(conversation_id) != message.conversation_id:
            raise NotFound("No such message in this conversation.")
        self.db.writable_conversation(scope, message.conversation_id)
        return message.conversation_id, message.pk

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
        check_scope(scope)
        name = clean_file_name(name)
        content_type = clean_content_type(content_type)
        agent = clean_text(agent, "agent", max_length=255, null=True)
        expires_at = clean_datetime(expires_at, "expires_at")
        with self.db.lock:
            self._target(scope, conversation_id, message_id)  # refuse before reading the content
        data, size = spool_content(content, app_settings.MAX_FILE_BYTES)
        try:
            data.seek(0)
            payload = data.read()
        finally:
            data.close()
        with self.db.lock:
            # Checked again: the conversation or message may have gone while the content was read.
            conversation_pk, message_pk = self._target(scope, conversation_id, message_id)
            record = StoredFile(
                id=uuid7(),
                conversation_id=conversation_pk,
                message_id=message_pk,
                uploader=scope.user,
                agent=agent,
                name=name,
                content_type=content_type,
                size=size,
                expires_at=expires_at,
                created_at=timezone.now(),
            )
            # Named as the ORM store names content (after the record), though no storage holds it.
            record.content.name = StoredFile._meta.get_field("content").generate_filename(record, name)
            self.db.files[record.pk] = record
            self.db.file_contents[record.pk] = payload
            return clone(record)

    def _visible(self, scope: Scope, file_id: Any) -> StoredFile:
        check_scope(scope)
        record = self.db.files.get(lookup_id(file_id, "file"))
        conversation = None if record is None else self.db.conversations.get(record.conversation_id)
        if conversation is None or not self.db.may_read(scope, conversation):
            raise NotFound("No such file.")
        return record

    def get(self, scope: Scope, file_id: Any) -> StoredFile:
        with self.db.lock:
            return clone(self._visible(scope, file_id))

    def open(self, scope: Scope, file_id: Any) -> IO[bytes]:
        with self.db.lock:
            record = self._visible(scope, file_id)
            payload = self.db.file_contents.get(record.pk)
        if payload is None:
            raise NotFound("The content of this file is missing.", code="file_content_missing")
        return io.BytesIO(payload)

    def read(self, scope: Scope, file_id: Any) -> bytes:
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
        with self.db.lock:
            conversation = self.db.readable_conversation(scope, conversation_id)
        limit, offset = clean_paging(limit, offset)
        order = clean_order(order, "asc")
        with_total = clean_with_total(with_total, before, after)
        with self.db.lock:
            files = [record for record in self.db.files.values() if record.conversation_id == conversation.pk]
            listed = past_cursors(
                files, files, lambda record: (record.created_at, record.pk), before=before, after=after, what="file"
            )
            listed.sort(key=lambda record: (record.created_at, record.pk), reverse=order == "desc")
            return page_of(listed, limit, offset, with_total=with_total)

    def delete(self, scope: Scope, file_id: Any) -> None:
        with self.db.lock:
            record = self._visible(scope, file_id)
            self.db.writable_conversation(scope, record.conversation_id)
            del self.db.files[record.pk]
            self.db.file_contents.pop(record.pk, None)

    def purge_expired(self, *, before: datetime | str | None = None, limit: int | None = None) -> int:
        before = clean_datetime(before, "before") or timezone.now()
        limit = clean_sweep_limit(limit)
        with self.db.lock:
            expired = sorted(
                (record for record in self.db.files.values() if record.expires_at is not None and record.expires_at <= before),
                key=lambda record: (record.expires_at, record.pk),
            )[:limit]
            for record in expired:
                del self.db.files[record.pk]
                self.db.file_contents.pop(record.pk, None)
            return len(expired)
