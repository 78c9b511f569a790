"""The event store: each conversation's ordered log, numbered 1, 2, 3 ... without gaps.

Sequence numbers come from the conversation row's ``last_event_seq`` counter,
read under the row's write lock and advanced in the same transaction as the
inserts. So concurrent appenders (threads or processes) queue on the lock,
every batch gets the next consecutive numbers, and pruning old events never
resets the count. The same transaction keeps ``event_stop_reason``: the
``stop_reason`` of the newest ``status_idle`` event, cleared by a later
``status_running`` one.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from ..conf import app_settings
from ..exceptions import Conflict, NotFound, Validation
from ..models import Conversation, Event
from ..scope import Scope
from . import appends
from .base import (
    async_twin,
    bump_counter,
    check_scope,
    clean_datetime,
    clean_object,
    clean_order,
    clean_paging,
    clean_text,
    lookup_id,
    may_read,
    parse_id,
    readable,
    readable_conversation,
    writable_conversation,
)

IDLE_EVENT = "status_idle"
RUNNING_EVENT = "status_running"
EVENT_KEYS = frozenset({"type", "data", "run_id"})
TYPE_MAX_LENGTH = Event._meta.get_field("type").max_length
STOP_REASON_MAX_LENGTH = Conversation._meta.get_field("event_stop_reason").max_length


@dataclass(frozen=True)
class EventPage:
    """One page of a conversation's log.

    ``last_seq`` is the seq of the last event returned (the smallest one when
    ``order="desc"``), or the ``after`` bound when the page is empty: pass it
    back as ``after`` (or ``before``, newest first) to read the next page.
    """

    events: list[Event]
    has_more: bool
    last_seq: int


@dataclass(frozen=True)
class EventSummary:
    """Where a conversation's log stands: its newest seq and the last stop reason."""

    last_seq: int
    stop_reason: str | None


@dataclass(frozen=True)
class _CleanEvent:
    type: str
    data: dict[str, Any]
    run_id: uuid.UUID | None

    def row(self, conversation_pk: uuid.UUID, seq: int) -> Event:
        return Event(conversation_id=conversation_pk, seq=seq, type=self.type, data=self.data, run_id=self.run_id)


class EventStore:
    """Append, read, summarise and prune the per-conversation event log."""

    def append(
        self, scope: Scope, conversation_id: Any, events: list[dict[str, Any]], *, run_id: Any = None
    ) -> list[Event]:
        """Append ``events`` in order, numbered after the conversation's last seq.

        All or nothing: one bad event (Validation, StorageLimit) writes none.
        Only the owner appends (ConversationNotOwned for a reader of a shared
        conversation, NotFound for anyone else).
        """
        check_scope(scope)
        batch = _clean_batch(events, run_id)
        if not batch:
            writable_conversation(scope, conversation_id)
            return []
        pk = lookup_id(conversation_id)
        # A batch with a status event decides the stop reason; one without leaves it as it is.
        sets_stop_reason = _has_status_event(batch)
        stop_reason = _stop_reason_after(None, batch)
        try:
            if appends.enabled():
                # One statement on PostgreSQL; it writes nothing when the scope does not own the conversation.
                with appends.unit():
                    rows = appends.append_events(scope, pk, batch, timezone.now(), stop_reason=stop_reason,
                                                 sets_stop_reason=sets_stop_reason)
                if rows is not None:
                    return rows
            # One transaction, no inner savepoint: a refused insert rolls the counter back with it.
            with transaction.atomic():
                also = {"event_stop_reason": stop_reason} if sets_stop_reason else {}
                last_seq = bump_counter(scope, pk, "last_event_seq", len(batch), **also)
                if last_seq is None:
                    writable_conversation(scope, conversation_id)  # raises NotFound or ConversationNotOwned
                    raise NotFound("No such conversation.")
                first_seq = last_seq - len(batch) + 1
                rows = [event.row(pk, first_seq + offset) for offset, event in enumerate(batch)]
                return Event.objects.bulk_create(rows)
        except IntegrityError:
            # Only a writer that bypasses the counter can collide with numbers handed out under its lock.
            raise Conflict("These event numbers are already taken.", code="event_seq_taken") from None

    def list(
        self,
        scope: Scope,
        conversation_id: Any,
        *,
        after: int = 0,
        before: int | None = None,
        types: list[str] | None = None,
        limit: int | None = None,
        order: str = "asc",
    ) -> EventPage:
        """Events with ``after < seq < before``, optionally of the given ``types``.

        One statement on the ``(conversation, seq)`` index, the access check its
        subquery; only an empty page checks access on its own, so that a
        conversation the scope may not see is NotFound, not an empty page.
        """
        check_scope(scope)
        pk = lookup_id(conversation_id)
        try:
            after = _clean_seq(after, "after")
            before = None if before is None else _clean_seq(before, "before")
            type_names = _clean_types(types)
            limit, _ = clean_paging(limit, 0)
            order = clean_order(order, "asc")
        except Validation:
            readable_conversation(scope, pk)  # NotFound comes first, as for every read
            raise

        queryset = Event.objects.filter(may_read(scope, pk), conversation_id=pk, seq__gt=after)
        if before is not None:
            queryset = queryset.filter(seq__lt=before)
        if type_names is not None:
            queryset = queryset.filter(type__in=type_names)
        # One row past the page tells whether another page follows, without a count.
        rows = list(queryset.order_by("seq" if order == "asc" else "-seq")[: limit + 1])
        if not rows:
            readable_conversation(scope, pk)
        events = rows[:limit]
        return EventPage(events=events, has_more=len(rows) > limit, last_seq=events[-1].seq if events else after)

    def summary(self, scope: Scope, conversation_ids: list[Any]) -> dict[uuid.UUID, EventSummary]:
        """Last seq and stop reason of each readable conversation; others are left out."""
        check_scope(scope)
        if not _is_list(conversation_ids):
            raise Validation("conversation_ids must be a list.", field="conversation_ids")
        if len(conversation_ids) > app_settings.MAX_PAGE_SIZE:
            raise Validation(
                f"At most {app_settings.MAX_PAGE_SIZE} conversations per summary.", field="conversation_ids"
            )
        pks = _parseable_ids(conversation_ids)
        rows = Conversation.objects.filter(readable(scope), pk__in=pks).values_list(
            "id", "last_event_seq", "event_stop_reason"
        )
        return {pk: EventSummary(last_seq=last_seq, stop_reason=stop_reason) for pk, last_seq, stop_reason in rows}

    def prune(self, *, before: datetime, limit: int | None = None) -> int:
        """Delete up to ``limit`` events created before ``before``, oldest first; returns how many.

        A system operation (retention sweeps): it crosses tenants and takes no
        scope. Sequence numbers keep counting from the conversation's counter.
        """
        cutoff = clean_datetime(before, "before")
        if cutoff is None:
            raise Validation("before is required.", field="before")
        if limit is None:
            limit = app_settings.SWEEP_BATCH_SIZE
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise Validation("limit must be a whole number, 1 or more.", field="limit")
        # One DELETE ... WHERE id IN (SELECT ... LIMIT n): no id list to ship, no parameter limit to hit.
        oldest = Event.objects.filter(created_at__lt=cutoff).order_by("created_at", "id").values("pk")[:limit]
        deleted, _ = Event.objects.filter(pk__in=oldest).delete()
        return deleted

    aappend = async_twin("append")
    alist = async_twin("list")
    asummary = async_twin("summary")
    aprune = async_twin("prune")


def _clean_batch(events: Any, default_run_id: Any) -> list[_CleanEvent]:
    if not isinstance(events, (list, tuple)):
        raise Validation("events must be a list of objects.", field="events")
    if len(events) > app_settings.MAX_PAGE_SIZE:
        raise Validation(f"At most {app_settings.MAX_PAGE_SIZE} events per append.", field="events")
    run_id = None if default_run_id is None else parse_id(default_run_id, "run_id")
    return [_clean_event(event, index, run_id) for index, event in enumerate(events)]


def _clean_event(event: Any, index: int, default_run_id: uuid.UUID | None) -> _CleanEvent:
    where = f"events[{index}]"
    if not isinstance(event, dict):
        raise Validation(f"{where} must be an object.", field=where)
    unknown = sorted(str(key) for key in set(event) - EVENT_KEYS)
    if unknown:
        raise Validation(f"{where} has unknown keys: {', '.join(unknown)}.", field=where)
    event_type = clean_text(event.get("type"), f"{where}.type", max_length=TYPE_MAX_LENGTH)
    if not event_type:
        raise Validation(f"{where}.type may not be empty.", field=f"{where}.type")
    data = clean_object(event.get("data"), f"{where}.data", max_bytes=app_settings.MAX_EVENT_BYTES)
    if event_type == IDLE_EVENT:
        _check_stop_reason(data.get("stop_reason"), f"{where}.data.stop_reason")
    run_id = event.get("run_id", default_run_id)
    if run_id is not None:
        run_id = parse_id(run_id, f"{where}.run_id")
    return _CleanEvent(type=event_type, data=data, run_id=run_id)


def _check_stop_reason(value: Any, field_name: str) -> None:
    # It is copied to a bounded column, so refuse what the column could not hold.
    if value is not None:
        clean_text(value, field_name, max_length=STOP_REASON_MAX_LENGTH)


def _stop_reason_after(current: str | None, batch: list[_CleanEvent]) -> str | None:
    stop_reason = current
    for event in batch:
        if event.type == IDLE_EVENT:
            stop_reason = event.data.get("stop_reason")
        elif event.type == RUNNING_EVENT:
            stop_reason = None
    return stop_reason


def _has_status_event(batch: list[_CleanEvent]) -> bool:
    return any(event.type in (IDLE_EVENT, RUNNING_EVENT) for event in batch)


def _clean_seq(value: Any, field_name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise Validation(f"{field_name} must be a whole number, 0 or more.", field=field_name)
    return value


def _clean_types(types: Any) -> list[str] | None:
    if types is None:
        return None
    if not _is_list(types):
        raise Validation("types must be a list of event types.", field="types")
    return [clean_text(name, "types", max_length=TYPE_MAX_LENGTH) for name in types]


def _is_list(value: Any) -> bool:
    """A list, tuple or set; a string is one value, not a list of characters."""
    return isinstance(value, (list, tuple, set, frozenset))


def _parseable_ids(values: Any) -> list[uuid.UUID]:
    # An id that is not a UUID names no conversation, so it is simply absent from the summary.
    pks = []
    for value in values:
        try:
            pks.append(parse_id(value, "conversation"))
        except Validation:
            continue
    return pks
