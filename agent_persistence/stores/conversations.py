"""The conversation store: conversations and their messages, scoped by tenant and owner.

Every method takes the acting :class:`~agent_persistence.scope.Scope` first.
Reads are allowed to the owner and, for a shared conversation, to anyone of
its tenant; writes to the owner only (a reader gets ConversationNotOwned, anyone
else NotFound, so existence never leaks across owners or tenants).

Input is cleaned before any transaction opens, so a bad value writes nothing
and comes back as a domain error, never as a driver error. Writes are
conditional UPDATEs whose row count is checked; the UPDATE that stamps a
conversation before a message write also holds the row's write lock until the
commit, which is what hands out gap-free message positions in commit order
(SQLite's IMMEDIATE transactions take the database write lock at BEGIN, which
serialises the same way).
"""

from __future__ import annotations

import functools
import uuid
from contextlib import nullcontext
from datetime import datetime
from typing import Any, Iterable

from django.db import IntegrityError, connections, router, transaction
from django.db.models import F, Subquery
from django.utils import timezone

from ..exceptions import Conflict, NotFound
from ..ids import uuid7
from ..models import Conversation, Message, Run, SupervisionStatus, TurnSupervision
from ..scope import Scope
from .base import (
    UNSET,
    Page,
    Statement,
    bump_counter,
    check_scope,
    check_writable,
    clean_datetime,
    clean_json,
    clean_object,
    clean_order,
    clean_paging,
    clean_text,
    clean_with_total,
    compile_statement,
    lookup_id,
    may_read,
    paginate,
    parse_id,
    read_models,
    readable_conversation,
    statement_slots,
    writable_conversation,
)
from .fencing import lock_turn
from .dialects import dialect_for
from .protocols import ConversationStoreProtocol
from .rules.conversations import (
    ID_TAKEN_MESSAGE,
    READABLE_CHUNK,
    ConversationAccess,
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
from .rules.conversations import (  # re-exported: these rules moved to agent_persistence/stores/rules/conversations.py
    JSON_COLUMNS as JSON_COLUMNS,
    MAX_VERSION as MAX_VERSION,
    MESSAGE_KEYS as MESSAGE_KEYS,
    ThreadEntry as ThreadEntry,
    clean_last_turn_status as clean_last_turn_status,
    clean_optional_list as clean_optional_list,
    clean_optional_object as clean_optional_object,
    clean_role as clean_role,
    clean_state as clean_state,
    is_pinned as is_pinned,
    same_value as same_value,
)
from .twins import twins_of

# -- cleaning conversation fields -------------------------------------------------------------


# -- cleaning messages ------------------------------------------------------------------------


# -- writes under the conversation's row lock -------------------------------------------------


def claim_positions(scope: Scope, pk: uuid.UUID, count: int, now: datetime) -> int | None:
    """Reserve ``count`` positions in the scope's own conversation (stamping ``updated_at``); the first one, or None."""
    next_position = bump_counter(scope, pk, "next_position", count, updated_at=now)
    return None if next_position is None else next_position - count


def create_if_absent(scope: Scope, pk: uuid.UUID, *, agent: str, title: str | None, now: datetime) -> None:
    """Insert the conversation unless a row with its id exists (whoever's it is)."""
    try:
        with transaction.atomic():
            Conversation.objects.create(
                id=pk, tenant=scope.tenant, owner=scope.user, agent=agent, title=title, created_at=now, updated_at=now
            )
    except IntegrityError:
        # A concurrent first append won (PostgreSQL made us wait for its commit), or the id is
        # someone else's: the claim that follows tells which.
        pass


def raise_not_writable(scope: Scope, pk: uuid.UUID) -> None:
    """Raise what a scope that failed to write the conversation deserves: 403 or 404."""
    writable_conversation(scope, pk)
    raise NotFound("No such conversation.")


def claim_conversation(
    scope: Scope, pk: uuid.UUID, *, count: int, create: bool, agent: str, title: str | None, now: datetime
) -> int:
    """Lock the scope's own conversation for a message write (creating it first if asked)."""
    position = claim_positions(scope, pk, count, now)
    if position is None and create:
        create_if_absent(scope, pk, agent=agent, title=title, now=now)
        position = claim_positions(scope, pk, count, now)
    if position is None:
        raise_not_writable(scope, pk)
    return position  # type: ignore[return-value]


def check_runs(pk: uuid.UUID, run_ids: Iterable[uuid.UUID | None]) -> None:
    # Foreign keys are checked only at commit (they are deferred): check here for a domain error.
    wanted = {run_id for run_id in run_ids if run_id is not None}
    if wanted and Run.objects.filter(conversation_id=pk, pk__in=wanted).count() != len(wanted):
        raise NotFound("No such run in this conversation.", field="run_id")


def insert_message(pk: uuid.UUID, message: MessageInput, position: int, now: datetime) -> Message:
    """Insert the row; a taken id raises IntegrityError, which the caller turns into :func:`message_conflict`.

    No savepoint of its own: the caller's ``atomic()`` is the unit that a
    duplicate id rolls back, which saves two round trips per append.
    """
    row = Message(
        id=message.id,
        conversation_id=pk,
        position=position,
        run_id=message.run_id,
        created_at=now,
        updated_at=now,
        **message.fields,
    )
    row.save(force_insert=True)
    return row


def message_conflict(message_ids: Iterable[uuid.UUID], *, merged_into: uuid.UUID | None = None) -> Conflict:
    """The domain error for an insert the database refused (the transaction is rolled back by then).

    ``merged_into``: a merge replaces its conversation's own ids, so only an id
    held by another conversation can have been refused.
    """
    taken_ids = Message.objects.filter(pk__in=list(message_ids))
    if merged_into is not None:
        taken_ids = taken_ids.exclude(conversation_id=merged_into)
    if taken_ids.exists():
        # Which id, and whose it is, stay unsaid: the id may belong to a conversation the caller
        # cannot see, and the answer must be the same whoever holds it (see ID_TAKEN_MESSAGE).
        return Conflict(ID_TAKEN_MESSAGE, code="message_exists")
    # Only a taken position is left, which the row lock rules out; report it, never the driver error.
    return Conflict("The transcript changed during the write; try again.")


def cursor_position(pk: uuid.UUID, message_pk: uuid.UUID) -> Any:
    """The position of a message of the conversation, as a subquery (no ordering: Message's joins the conversation)."""
    return Message.objects.filter(pk=message_pk, conversation_id=pk).order_by().values("position")


def message_page_query(scope: Scope, pk: uuid.UUID, ordering: str, before: Any, after: Any) -> Any:
    """The messages of an uncounted page: readable by ``scope``, strictly between the cursors, in order.

    One statement: the access check and the cursors' positions are its subqueries.
    """
    cursors = {
        lookup: Subquery(cursor_position(pk, cursor))
        for lookup, cursor in (("position__lt", before), ("position__gt", after))
        if cursor is not None
    }
    return Message.objects.filter(may_read(scope, pk), conversation_id=pk, **cursors).order_by(ordering)


@functools.lru_cache(maxsize=256)
def message_page_statement(alias: str, ordering: str, before: bool, after: bool, offset: int, limit: int) -> Statement:
    """:func:`message_page_query` of this shape, compiled once, with one row past the page for ``has_more``.

    Compiling the queryset cost a cursor page about as much as running it; the
    statement keeps only SQL text (see :class:`~.base.Statement`).
    """
    slots = statement_slots("tenant", "user", ids=("conversation", "before", "after"))
    scope = Scope(tenant=slots["tenant"], user=slots["user"])
    queryset = message_page_query(
        scope, slots["conversation"], ordering, slots["before"] if before else None, slots["after"] if after else None
    )
    return compile_statement(queryset.using(alias)[offset : offset + limit + 1], slots)


def transcript(pk: uuid.UUID) -> list[Message]:
    return list(Message.objects.filter(conversation_id=pk).order_by("position"))


# -- saving a whole thread (merge by id, full overwrite) ----------------------------------------


#: The columns a saved message may change; ``created_at`` only when the caller gives one.
MESSAGE_COLUMNS = ("role", "content", "name", "tool_call_id", "tool_calls", "files", "metadata", "usage", "run_id")


def check_no_running_turn(pk: uuid.UUID) -> None:
    """Raise :func:`turn_running` if the conversation's turn is running; the caller holds the conversation's row lock.

    A turn starts and seals under that lock, so the supervision row read here
    cannot change before the caller's transaction ends.
    """
    running = (
        # A handed-off turn runs on too, in whichever replica claims it.
        TurnSupervision.objects.filter(pk=pk, status__in=(SupervisionStatus.RUNNING, SupervisionStatus.HANDED_OFF))
        .values_list("message_id", flat=True).first()
    )
    if running is not None:
        raise turn_running(running)


def saved_tag(pk: uuid.UUID) -> str:
    """The thread tag of the conversation whose row lock the caller's transaction holds."""
    return thread_tag(Conversation.objects.only("version", "next_position", "updated_at", "thread_revision").get(pk=pk))


def new_message_row(pk: uuid.UUID, message: MessageInput, position: int, now: datetime) -> Message:
    return Message(
        id=message.id,
        conversation_id=pk,
        position=position,
        run_id=message.run_id,
        created_at=message.created_at or now,
        updated_at=now,
        **message.fields,
    )


def save_thread(pk: uuid.UUID, incoming: list[MessageInput], *, merge: bool, now: datetime) -> list[Message]:
    """Make the transcript ``incoming`` (merged by id first when ``merge``), at positions 0 .. n - 1.

    The caller holds the conversation's row lock in its transaction, so no other
    message write interleaves. Stored messages left out are deleted (their files
    stay, detached); a kept message is written only where it changes (its fields,
    or its position), so an unchanged one keeps its id, times and order; the new
    ones are inserted in one statement. Positions move in two steps, through a
    range above every stored and every final position, because the unique
    (conversation, position) constraint is checked row by row and must never see
    two rows at one position. ``next_position`` is set to n, so the next append
    follows the saved thread without a gap.
    """
    positions = dict(Message.objects.filter(conversation_id=pk).order_by("position").values_list("id", "position"))
    thread = merged_thread(list(positions), incoming) if merge else list(incoming)
    kept_ids = {entry if isinstance(entry, uuid.UUID) else entry.id for entry in thread}
    dropped = [message_id for message_id in positions if message_id not in kept_ids]
    if dropped:
        Message.objects.filter(conversation_id=pk, pk__in=dropped).delete()
    # Only the rows an incoming message may replace are read whole (a new turn reads none of them).
    replaced = [entry.id for entry in thread if isinstance(entry, MessageInput) and entry.id in positions]
    columns = ("id", "created_at", *MESSAGE_COLUMNS)
    stored = {row["id"]: row for row in Message.objects.filter(conversation_id=pk, pk__in=replaced).values(*columns)}
    updates: dict[uuid.UUID, dict[str, Any]] = {}
    new_rows: list[Message] = []
    for position, entry in enumerate(thread):
        message_id = entry if isinstance(entry, uuid.UUID) else entry.id
        if message_id not in positions:
            new_rows.append(new_message_row(pk, entry, position, now))  # type: ignore[arg-type]
            continue
        changes = {} if isinstance(entry, uuid.UUID) else message_changes(stored[message_id], entry)
        if changes:
            changes["updated_at"] = now
        if positions[message_id] != position:
            changes["position"] = position
        if changes:
            updates[message_id] = changes
    moving = [message_id for message_id, changes in updates.items() if "position" in changes]
    if moving:
        above = max([len(thread), *positions.values()]) + 1
        Message.objects.filter(conversation_id=pk, pk__in=moving).update(position=F("position") + above)
    for message_id, changes in updates.items():
        Message.objects.filter(pk=message_id, conversation_id=pk).update(**changes)
    Message.objects.bulk_create(new_rows)
    Conversation.objects.filter(pk=pk).update(next_position=len(thread))
    return transcript(pk)


class ConversationStore(twins_of(ConversationStoreProtocol)):
    """Conversations and messages on the Django ORM; see ``docs/reference/stores/conversations.md``."""

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
        """A new conversation owned by ``scope``, at version 0."""
        check_scope(scope)
        pk = uuid7() if id is None else parse_id(id, "id")
        fields = clean_conversation_changes(
            agent=agent, title=title, metadata=metadata, state=state, shared=shared, action_due_at=action_due_at
        )
        now = timezone.now()
        conversation = Conversation(
            id=pk, tenant=scope.tenant, owner=scope.user, version=0, created_at=now, updated_at=now, **fields
        )
        try:
            with transaction.atomic():
                conversation.save(force_insert=True)
        except IntegrityError:
            raise Conflict(ID_TAKEN_MESSAGE, code="conversation_exists") from None
        return conversation

    def get(self, scope: Scope, conversation_id: Any) -> Conversation:
        """The conversation if ``scope`` may read it, else NotFound."""
        return readable_conversation(scope, conversation_id)

    def readable_ids(self, pairs: Iterable[tuple[Scope, Any]]) -> set[tuple[Scope, uuid.UUID]]:
        """The pairs whose scope may read the conversation now.

        The websocket access sweep calls it for every conversation followed in the process, every
        ``WEBSOCKET_ACCESS_CHECK_INTERVAL``, so it reads three columns as tuples (no model instances):
        on PostgreSQL in one statement (the ids as one array), elsewhere one query per
        :data:`READABLE_CHUNK` ids, the chunks of one call in one transaction. Either way 10,000 idle
        sockets cost one commit per sweep.
        """
        pairs = clean_pairs(pairs)
        ids = list({pk for _, pk in pairs})
        if not ids:
            return set()
        db = connections[router.db_for_read(Conversation)]
        rows = dialect_for(db).conversation_access(db, ids)
        if rows is None:
            rows = []
            with transaction.atomic(using=db.alias) if len(ids) > READABLE_CHUNK else nullcontext():
                for start in range(0, len(ids), READABLE_CHUNK):
                    rows += Conversation.objects.using(db.alias).filter(pk__in=ids[start : start + READABLE_CHUNK]).values_list(
                        "pk", "tenant", "owner", "shared"
                    )
        access = {pk: ConversationAccess(tenant, owner, shared) for pk, tenant, owner, shared in rows}
        return readable_among(pairs, access)

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
        """The scope's own conversations, newest first (``order="asc"``: oldest first)."""
        check_scope(scope)
        limit, offset = clean_paging(limit, offset)
        order = clean_order(order, "desc")
        pinned_first = clean_flag(pinned_first, "pinned_first")
        queryset = Conversation.objects.filter(tenant=scope.tenant, owner=scope.user)
        if agent is not None:
            queryset = queryset.filter(agent=clean_agent(agent))
        if action_due_before is not None:
            due = clean_datetime(action_due_before, "action_due_before")
            queryset = queryset.filter(action_due_at__lte=due)
            ordering = ["action_due_at", "created_at", "id"]
        elif order == "desc":
            ordering = ["-created_at", "-id"]
        else:
            ordering = ["created_at", "id"]
        if pinned_first:
            ordering.insert(0, "-pinned")
        return paginate(queryset.order_by(*ordering), limit, offset, with_total=clean_with_total(with_total))

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
        """Replace the given fields; version + 1. Owner only."""
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
        with transaction.atomic():
            if not self._write_conversation(scope, pk, changes):
                raise_not_writable(scope, pk)
            return Conversation.objects.get(pk=pk)

    def update_if(self, scope: Scope, conversation_id: Any, version: Any, **changes: Any) -> Conversation | None:
        """Like :meth:`update`, only if the stored version is ``version``; None when it is not."""
        check_scope(scope)
        pk = lookup_id(conversation_id)
        version = clean_version(version)
        unknown = set(changes) - {"title", "metadata", "state", "agent", "shared", "action_due_at", "last_turn_status"}
        if unknown:
            raise TypeError(f"update_if() got unexpected keyword arguments: {', '.join(sorted(unknown))}")
        cleaned = clean_conversation_changes(**changes)
        with transaction.atomic():
            if self._write_conversation(scope, pk, cleaned, version=version):
                return Conversation.objects.get(pk=pk)
            # Nothing written: tell a lost race (None) from a conversation out of reach (an error).
            writable_conversation(scope, pk)
            return None

    def _write_conversation(
        self, scope: Scope, pk: uuid.UUID, changes: dict[str, Any], *, version: int | None = None
    ) -> bool:
        """One conditional UPDATE of the scope's own conversation; whether it matched."""
        queryset = Conversation.objects.filter(pk=pk, tenant=scope.tenant, owner=scope.user)
        if version is not None:
            queryset = queryset.filter(version=version)
        return bool(queryset.update(**changes, version=F("version") + 1, updated_at=timezone.now()))

    def delete(self, scope: Scope, conversation_id: Any) -> None:
        """Delete the conversation and all it holds (messages, runs, events, files, tasks). Owner only."""
        check_scope(scope)
        pk = lookup_id(conversation_id)
        with transaction.atomic():
            # The turn's lock order (stores.turns): the supervision row, then the conversation. The
            # cascade deletes the supervision row, so locking the conversation first would deadlock
            # with a producer that holds its fence and appends (a seal mid-turn). The conversation's
            # lock makes a concurrent message or file write wait for the delete (and then find
            # nothing) instead of slipping a child row in after the cascade was collected.
            _, conversation = lock_turn(pk)
            check_writable(scope, conversation).delete()

    def share(self, scope: Scope, conversation_id: Any, shared: Any = True) -> Conversation:
        """Make the conversation readable (or not) by everyone of its tenant; an update."""
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
        """Append a message at the next position; with ``create`` the conversation is made if absent."""
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
        try:
            # One statement on PostgreSQL; it writes nothing when the general path below must decide.
            row = dialect_for().append_message(scope, pk, message, now)
            if row is not None:
                return row
            with transaction.atomic():
                position = claim_conversation(scope, pk, count=1, create=create, agent=agent, title=title, now=now)
                check_runs(pk, [message.run_id])
                return insert_message(pk, message, position, now)
        except IntegrityError:
            raise message_conflict([message.id]) from None

    def get_message(self, scope: Scope, conversation_id: Any, message_id: Any) -> Message:
        conversation = readable_conversation(scope, conversation_id)
        return self._message_of(conversation.pk, message_id)

    def _message_of(self, pk: uuid.UUID, message_id: Any) -> Message:
        try:
            return Message.objects.get(pk=lookup_id(message_id, "message"), conversation_id=pk)
        except Message.DoesNotExist:
            raise NotFound("No such message.") from None

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
        """The transcript, oldest first; ``before`` / ``after`` are strict message-id cursors.

        ``with_total`` (default: only without a cursor) counts the messages the
        page is taken from. Without it the page is one statement on the
        ``(conversation, position)`` index: the access check and the cursors'
        positions are its subqueries, and ``has_more`` comes from one row past
        the page. Only an empty page looks again, to tell "no more messages"
        from a conversation or a cursor the scope may not see.
        """
        check_scope(scope)
        limit, offset = clean_paging(limit, offset)
        order = clean_order(order, "asc")
        with_total = clean_with_total(with_total, before, after)
        ordering = "position" if order == "asc" else "-position"
        if with_total:
            conversation = readable_conversation(scope, conversation_id)
            queryset = Message.objects.filter(conversation_id=conversation.pk)
            if before is not None:
                queryset = queryset.filter(position__lt=self._message_of(conversation.pk, before).position)
            if after is not None:
                queryset = queryset.filter(position__gt=self._message_of(conversation.pk, after).position)
            return paginate(queryset.order_by(ordering), limit, offset)
        try:
            values = {
                "tenant": scope.tenant,
                "user": scope.user,
                "conversation": lookup_id(conversation_id),
                **{name: lookup_id(cursor, "message") for name, cursor in (("before", before), ("after", after)) if cursor is not None},
            }
        except NotFound:
            page = None  # a malformed id: raised below, in the order of the counted read
        else:
            alias = Message.objects.db
            statement = message_page_statement(alias, ordering, "before" in values, "after" in values, offset, limit)
            rows = read_models(Message, statement, values, alias)
            page = Page(items=rows[:limit], total=None, limit=limit, offset=offset, has_more=len(rows) > limit)
            if page.items:
                return page
        conversation = readable_conversation(scope, conversation_id)
        for cursor in (before, after):
            if cursor is not None:
                self._message_of(conversation.pk, cursor)
        assert page is not None, "a malformed cursor passed lookup_id"
        return page

    def update_message(
        self, scope: Scope, conversation_id: Any, message_id: Any, *, content: Any = UNSET, metadata: Any = UNSET
    ) -> Message:
        """Replace the message's content and/or metadata; moves only its ``updated_at``. Owner only.

        The conversation's ``thread_revision`` moves so that its thread tag (If-Match of a save)
        changes; its row is locked first, in the order of a save (conversation, then messages).
        """
        check_scope(scope)
        pk = lookup_id(conversation_id)
        changes: dict[str, Any] = {}
        if content is not UNSET:
            changes["content"] = clean_json(content, "content")
        if metadata is not UNSET:
            changes["metadata"] = clean_object(metadata, "metadata")
        now = timezone.now()
        with transaction.atomic():
            writable_conversation(scope, pk)
            Conversation.objects.filter(pk=pk).update(thread_revision=F("thread_revision") + 1)
            message_pk = lookup_id(message_id, "message")
            tool_calls = (
                Message.objects.select_for_update()
                .filter(pk=message_pk, conversation_id=pk)
                .values_list("tool_calls", flat=True)
                .first()
            )
            if "content" in changes:
                check_message_size(changes["content"], tool_calls)
            updated = Message.objects.filter(pk=message_pk, conversation_id=pk).update(**changes, updated_at=now)
            if not updated:
                raise NotFound("No such message.")
            return Message.objects.get(pk=message_pk)

    def delete_message(self, scope: Scope, conversation_id: Any, message_id: Any) -> None:
        """Delete one message; its files stay, detached from it. Moves the conversation's ``thread_revision``. Owner only."""
        check_scope(scope)
        pk = lookup_id(conversation_id)
        with transaction.atomic():
            writable_conversation(scope, pk)
            Conversation.objects.filter(pk=pk).update(thread_revision=F("thread_revision") + 1)  # the thread tag moves
            deleted, _ = Message.objects.filter(pk=lookup_id(message_id, "message"), conversation_id=pk).delete()
            if not deleted:
                raise NotFound("No such message.")

    def merge_messages(
        self, scope: Scope, conversation_id: Any, messages: Any, *, create: Any = False, agent: Any = "",
        if_match: Any = None,
    ) -> SavedThread:
        """Save a posted transcript with the merge-by-id rule (cutoff, replace, append); the resulting transcript.

        ``if_match`` (a conversation version, or a :func:`thread_tag`) makes the save conditional:
        PreconditionFailed when the stored conversation is elsewhere, NotFound when it is absent
        (even with ``create``). The returned :class:`SavedThread` carries the saved thread's ``tag``.
        """
        return self._save(scope, conversation_id, messages, create=create, agent=agent, merge=True, if_match=if_match)

    def replace_messages(
        self, scope: Scope, conversation_id: Any, messages: Any, *, create: Any = False, agent: Any = "",
        if_match: Any = None,
    ) -> SavedThread:
        """Replace the transcript with exactly ``messages`` (a full overwrite); the resulting transcript and its tag."""
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
        try:
            with transaction.atomic():
                if merge and not incoming:
                    # Nothing to merge: history is never touched, not even updated_at. A precondition
                    # names a stored thread: with one, an absent conversation is NotFound, never created.
                    if create and expected is None:
                        create_if_absent(scope, pk, agent=agent, title=None, now=now)
                    # Locked, so the transcript read next is the one the tag names.
                    conversation = writable_conversation(scope, pk, for_update=True)
                    check_thread_tag(expected, conversation)
                    return SavedThread(transcript(pk), thread_tag(conversation))
                if expected is not None:
                    # Locked before the claim stamps updated_at: the tag compared is the one a reader saw.
                    check_thread_tag(expected, writable_conversation(scope, pk, for_update=True))
                claim_conversation(scope, pk, count=0, create=create, agent=agent, title=None, now=now)
                check_no_running_turn(pk)
                check_runs(pk, [message.run_id for message in incoming])
                saved = save_thread(pk, incoming, merge=merge, now=now)
                return SavedThread(saved, saved_tag(pk))
        except IntegrityError:
            raise message_conflict((message.id for message in incoming), merged_into=pk) from None
