"""The in-memory conversation store: the rules of :class:`~agent_persistence.stores.conversations.ConversationStore`.

Input is cleaned by the ORM store's own functions, before the family's lock
is taken; each operation then reads, decides and writes under the lock.
"""

from __future__ import annotations

import contextlib
import operator
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from datetime import datetime
from typing import Any

from django.utils import timezone

from ...exceptions import Conflict, NotFound
from ...ids import uuid7
from ...models import Conversation, Message, SupervisionStatus
from ...scope import Scope
from ..protocols import ConversationStoreProtocol
from ..rules.base import (
    UNSET,
    Page,
    check_scope,
    clean_datetime,
    clean_json,
    clean_object,
    clean_order,
    clean_paging,
    clean_text,
    clean_with_total,
    lookup_id,
    page_of_rows,
    parse_id,
)
from ..rules.conversations import (
    ID_TAKEN_MESSAGE,
    MessageInput,
    SavedThread,
    _max_length,
    check_message_size,
    check_thread_tag,
    clean_agent,
    clean_conversation_changes,
    clean_flag,
    clean_incoming_messages,
    clean_message,
    clean_pairs,
    clean_thread_tag,
    clean_version,
    conversation_pk,
    merged_thread,
    message_changes,
    readable_among,
    thread_tag,
    turn_running,
)
from ..twins import twins_of
from .database import DEFAULT_DATABASE, MemoryDatabase, clone

UPDATE_IF_FIELDS = frozenset({"title", "metadata", "state", "agent", "shared", "action_due_at", "last_turn_status"})


def page_of(rows: list[Any], limit: int, offset: int, *, with_total: bool = True) -> Page[Any]:
    """One page of already ordered records, copied; counted as :func:`~agent_persistence.stores.base.paginate` counts."""
    page = page_of_rows(rows, limit, offset, with_total=with_total)
    return replace(page, items=[clone(row) for row in page.items])


def past_cursors(
    rows: list[Any], cursor_rows: list[Any], sort_key: Callable[[Any], Any], *, before: Any, after: Any, what: str
) -> list[Any]:
    """The rows strictly before / after the cursors on ``sort_key`` (``(key, pk)``), as :func:`~agent_persistence.stores.base.keyset` keeps them.

    A cursor must name one of ``cursor_rows`` (by id); any other value is NotFound ("No such <what>.").
    """
    for cursor, keep in ((before, operator.lt), (after, operator.gt)):
        if cursor is None:
            continue
        pk = lookup_id(cursor, what)
        named = next((row for row in cursor_rows if row.pk == pk), None)
        if named is None:
            raise NotFound(f"No such {what}.")
        mark = sort_key(named)
        rows = [row for row in rows if keep(sort_key(row), mark)]
    return rows


class MemoryConversationStore(twins_of(ConversationStoreProtocol)):
    """Conversations and messages in a :class:`MemoryDatabase`; see ``docs/reference/stores/conversations.md``."""

    def __init__(self, database: MemoryDatabase | None = None) -> None:
        self.db = database or DEFAULT_DATABASE

    # -- conversations ------------------------------------------------------------------------

    def create(
        self,
        scope: Scope,
        *,
        id: Any = None,
        agent: Any = "",
        title: Any = None,
        metadata: Any = None,
        state: Any = None,
        shared: Any = False,
        action_due_at: Any = None,
    ) -> Conversation:
        check_scope(scope)
        pk = uuid7() if id is None else parse_id(id, "id")
        fields = clean_conversation_changes(
            agent=agent, title=title, metadata=metadata, state=state, shared=shared, action_due_at=action_due_at
        )
        now = timezone.now()
        conversation = Conversation(
            id=pk, tenant=scope.tenant, owner=scope.user, version=0, created_at=now, updated_at=now, **fields
        )
        with self.db.lock:
            if pk in self.db.conversations:
                raise Conflict("A conversation with this id already exists.", code="conversation_exists")
            self.db.conversations[pk] = conversation
            return clone(conversation)

    def get(self, scope: Scope, conversation_id: Any) -> Conversation:
        with self.db.lock:
            return clone(self.db.readable_conversation(scope, conversation_id))

    def readable_ids(self, pairs: Iterable[tuple[Scope, Any]]) -> set[tuple[Scope, uuid.UUID]]:
        pairs = clean_pairs(pairs)
        with self.db.lock:
            return readable_among(pairs, self.db.conversations)

    def list(
        self,
        scope: Scope,
        *,
        limit: Any = None,
        offset: Any = 0,
        order: Any = "desc",
        agent: Any = None,
        pinned_first: Any = False,
        action_due_before: Any = None,
        with_total: bool | None = None,
    ) -> Page[Conversation]:
        check_scope(scope)
        limit, offset = clean_paging(limit, offset)
        order = clean_order(order, "desc")
        pinned_first = clean_flag(pinned_first, "pinned_first")
        agent_name = None if agent is None else clean_agent(agent)
        due = None if action_due_before is None else clean_datetime(action_due_before, "action_due_before")
        with self.db.lock:
            rows = [
                row
                for row in self.db.conversations.values()
                if row.tenant == scope.tenant and row.owner == scope.user and (agent_name is None or row.agent == agent_name)
            ]
            if action_due_before is not None:
                rows = [row for row in rows if row.action_due_at is not None and row.action_due_at <= due]
                rows.sort(key=lambda row: (row.action_due_at, row.created_at, row.pk))
            else:
                rows.sort(key=lambda row: (row.created_at, row.pk), reverse=order == "desc")
            if pinned_first:
                rows.sort(key=lambda row: not row.pinned)  # stable: keeps the order within each group
            return page_of(rows, limit, offset, with_total=clean_with_total(with_total))

    def update(
        self,
        scope: Scope,
        conversation_id: Any,
        *,
        title: Any = UNSET,
        metadata: Any = UNSET,
        state: Any = UNSET,
        agent: Any = UNSET,
        shared: Any = UNSET,
        action_due_at: Any = UNSET,
        last_turn_status: Any = UNSET,
    ) -> Conversation:
        check_scope(scope)
        pk = lookup_id(conversation_id)
        changes = clean_conversation_changes(
            title=title,
            metadata=metadata,
            state=state,
            agent=agent,
            shared=shared,
            action_due_at=action_due_at,
            last_turn_status=last_turn_status,
        )
        with self.db.lock:
            conversation = self.db.writable_conversation(scope, pk)
            self._write(conversation, changes)
            return clone(conversation)

    def update_if(self, scope: Scope, conversation_id: Any, version: Any, **changes: Any) -> Conversation | None:
        check_scope(scope)
        pk = lookup_id(conversation_id)
        version = clean_version(version)
        unknown = set(changes) - UPDATE_IF_FIELDS
        if unknown:
            raise TypeError(f"update_if() got unexpected keyword arguments: {', '.join(sorted(unknown))}")
        cleaned = clean_conversation_changes(**changes)
        with self.db.lock:
            conversation = self.db.writable_conversation(scope, pk)
            if conversation.version != version:
                return None
            self._write(conversation, cleaned)
            return clone(conversation)

    def _write(self, conversation: Conversation, changes: dict[str, Any]) -> None:
        for name, value in changes.items():
            setattr(conversation, name, value)
        conversation.version += 1
        conversation.updated_at = timezone.now()

    def delete(self, scope: Scope, conversation_id: Any) -> None:
        with self.db.lock:
            conversation = self.db.writable_conversation(scope, conversation_id)
            self.db.delete_conversation(conversation.pk)

    def share(self, scope: Scope, conversation_id: Any, shared: Any = True) -> Conversation:
        return self.update(scope, conversation_id, shared=shared)

    # -- messages -----------------------------------------------------------------------------

    def append_message(
        self,
        scope: Scope,
        conversation_id: Any,
        *,
        role: Any,
        content: Any,
        id: Any = None,
        name: Any = None,
        tool_call_id: Any = None,
        tool_calls: Any = None,
        files: Any = None,
        metadata: Any = None,
        usage: Any = None,
        run_id: Any = None,
        create: Any = False,
        agent: Any = "",
        title: Any = None,
    ) -> Message:
        check_scope(scope)
        create = clean_flag(create, "create")
        pk = conversation_pk(conversation_id, create=create)
        message = clean_message(
            role=role,
            content=content,
            id=id,
            name=name,
            tool_call_id=tool_call_id,
            tool_calls=tool_calls,
            files=files,
            metadata=metadata,
            usage=usage,
            run_id=run_id,
        )
        agent = clean_agent(agent)
        title = clean_text(title, "title", max_length=_max_length(Conversation, "title"), null=True)
        now = timezone.now()
        with self.db.lock:
            with self._created_if_absent(scope, pk, create, agent=agent, title=title, now=now):
                conversation = self.db.writable_conversation(scope, pk)
                self._check_new_messages(pk, [message])
            row = self._insert(conversation, message, now)
            conversation.updated_at = now
            return clone(row)

    @contextlib.contextmanager
    def _created_if_absent(
        self, scope: Scope, pk: uuid.UUID, create: bool, *, agent: str, title: str | None, now: datetime
    ) -> Iterator[None]:
        """With ``create``, insert the conversation if no row has its id; a refusal inside takes it back."""
        created = create and pk not in self.db.conversations
        if created:
            self.db.conversations[pk] = Conversation(
                id=pk, tenant=scope.tenant, owner=scope.user, agent=agent, title=title, created_at=now, updated_at=now
            )
        try:
            yield
        except BaseException:
            if created:
                del self.db.conversations[pk]
            raise

    def _check_new_messages(self, pk: uuid.UUID, messages: list[MessageInput], *, merged_into: bool = False) -> None:
        """Refuse runs outside the conversation and ids held elsewhere, before anything is written."""
        wanted = {message.run_id for message in messages if message.run_id is not None}
        for run_id in wanted:
            run = self.db.runs.get(run_id)
            if run is None or run.conversation_id != pk:
                raise NotFound("No such run in this conversation.", field="run_id")
        for message in messages:
            stored = self.db.messages.get(message.id)
            if stored is not None and not (merged_into and stored.conversation_id == pk):
                raise Conflict(ID_TAKEN_MESSAGE, code="message_exists")

    def _insert(self, conversation: Conversation, message: MessageInput, now: datetime) -> Message:
        row = Message(
            id=message.id,
            conversation_id=conversation.pk,
            position=conversation.next_position,
            run_id=message.run_id,
            created_at=now,
            updated_at=now,
            **message.fields,
        )
        conversation.next_position += 1
        self.db.messages[row.pk] = row
        return row

    def _transcript(self, pk: uuid.UUID) -> list[Message]:
        return sorted((row for row in self.db.messages.values() if row.conversation_id == pk), key=lambda row: row.position)

    def _message_of(self, pk: uuid.UUID, message_id: Any) -> Message:
        message = self.db.messages.get(lookup_id(message_id, "message"))
        if message is None or message.conversation_id != pk:
            raise NotFound("No such message.")
        return message

    def get_message(self, scope: Scope, conversation_id: Any, message_id: Any) -> Message:
        with self.db.lock:
            conversation = self.db.readable_conversation(scope, conversation_id)
            return clone(self._message_of(conversation.pk, message_id))

    def list_messages(
        self,
        scope: Scope,
        conversation_id: Any,
        *,
        limit: Any = None,
        offset: Any = 0,
        order: Any = "asc",
        before: Any = None,
        after: Any = None,
        with_total: bool | None = None,
    ) -> Page[Message]:
        limit, offset = clean_paging(limit, offset)
        order = clean_order(order, "asc")
        with_total = clean_with_total(with_total, before, after)
        with self.db.lock:
            conversation = self.db.readable_conversation(scope, conversation_id)
            rows = self._transcript(conversation.pk)
            if before is not None:
                cursor = self._message_of(conversation.pk, before).position
                rows = [row for row in rows if row.position < cursor]
            if after is not None:
                cursor = self._message_of(conversation.pk, after).position
                rows = [row for row in rows if row.position > cursor]
            if order == "desc":
                rows.reverse()
            return page_of(rows, limit, offset, with_total=with_total)

    def update_message(
        self, scope: Scope, conversation_id: Any, message_id: Any, *, content: Any = UNSET, metadata: Any = UNSET
    ) -> Message:
        check_scope(scope)
        pk = lookup_id(conversation_id)
        changes: dict[str, Any] = {}
        if content is not UNSET:
            changes["content"] = clean_json(content, "content")
        if metadata is not UNSET:
            changes["metadata"] = clean_object(metadata, "metadata")
        with self.db.lock:
            conversation = self.db.writable_conversation(scope, pk)
            message = self._message_of(pk, message_id)
            if "content" in changes:
                check_message_size(changes["content"], message.tool_calls)
            for name, value in changes.items():
                setattr(message, name, value)
            message.updated_at = timezone.now()
            conversation.thread_revision += 1  # as the ORM's: the thread tag moves
            return clone(message)

    def delete_message(self, scope: Scope, conversation_id: Any, message_id: Any) -> None:
        check_scope(scope)
        pk = lookup_id(conversation_id)
        with self.db.lock:
            conversation = self.db.writable_conversation(scope, pk)
            self.db.delete_message(self._message_of(pk, message_id).pk)
            conversation.thread_revision += 1  # as the ORM's: the thread tag moves

    def merge_messages(
        self, scope: Scope, conversation_id: Any, messages: Any, *, create: Any = False, agent: Any = "",
        if_match: Any = None,
    ) -> SavedThread:
        return self._save(scope, conversation_id, messages, create=create, agent=agent, merge=True, if_match=if_match)

    def replace_messages(
        self, scope: Scope, conversation_id: Any, messages: Any, *, create: Any = False, agent: Any = "",
        if_match: Any = None,
    ) -> SavedThread:
        return self._save(scope, conversation_id, messages, create=create, agent=agent, merge=False, if_match=if_match)

    def _save(
        self, scope: Scope, conversation_id: Any, messages: Any, *, create: Any, agent: Any, merge: bool,
        if_match: Any = None,
    ) -> SavedThread:
        check_scope(scope)
        create = clean_flag(create, "create")
        pk = conversation_pk(conversation_id, create=create)
        incoming = clean_incoming_messages(messages)
        agent = clean_agent(agent)
        expected = clean_thread_tag(if_match)
        now = timezone.now()
        with self.db.lock:
            absent = pk not in self.db.conversations
            with self._created_if_absent(scope, pk, create, agent=agent, title=None, now=now):
                conversation = self.db.writable_conversation(scope, pk)
                if expected is not None and absent:
                    raise NotFound("No such conversation.")  # a precondition names a stored thread (as the ORM's)
                check_thread_tag(expected, conversation)
                supervision = self.db.supervision.get(pk)
                if incoming or not merge:  # as the ORM's: an empty merge writes nothing and is not refused
                    open_statuses = (SupervisionStatus.RUNNING, SupervisionStatus.HANDED_OFF)
                    if supervision is not None and supervision.status in open_statuses:
                        raise turn_running(supervision.message_id)
                self._check_new_messages(pk, incoming, merged_into=True)
            if merge and not incoming:
                return SavedThread([clone(row) for row in self._transcript(pk)], thread_tag(conversation))
            self._save_thread(conversation, incoming, merge=merge, now=now)
            conversation.updated_at = now
            return SavedThread([clone(row) for row in self._transcript(pk)], thread_tag(conversation))

    def _save_thread(self, conversation: Conversation, incoming: list[MessageInput], *, merge: bool, now: datetime) -> None:
        """The ORM's ``save_thread``: the transcript becomes the (merged) list, at positions 0 .. n - 1."""
        stored = {row.pk: row for row in self._transcript(conversation.pk)}
        thread = merged_thread(list(stored), incoming) if merge else list(incoming)
        kept_ids = {entry if isinstance(entry, uuid.UUID) else entry.id for entry in thread}
        for message_id in stored:
            if message_id not in kept_ids:
                self.db.delete_message(message_id)
        for position, entry in enumerate(thread):
            if isinstance(entry, MessageInput) and entry.id not in stored:
                self.db.messages[entry.id] = Message(
                    id=entry.id,
                    conversation_id=conversation.pk,
                    position=position,
                    run_id=entry.run_id,
                    created_at=entry.created_at or now,
                    updated_at=now,
                    **entry.fields,
                )
                continue
            row = stored[entry if isinstance(entry, uuid.UUID) else entry.id]
            changes = {} if isinstance(entry, uuid.UUID) else message_changes(vars(row), entry)
            for column, value in changes.items():
                setattr(row, column, value)
            if changes:
                row.updated_at = now
            row.position = position
        conversation.next_position = len(thread)
