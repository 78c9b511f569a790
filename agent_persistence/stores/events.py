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
from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from ..conf import app_settings
from ..exceptions import Conflict, NotFound, Validation
from ..models import Conversation, Event
from ..scope import Scope
from .base import (
    bump_counter,
    check_scope,
    clean_datetime,
    clean_order,
    clean_paging,
    lookup_id,
    may_read,
    readable,
    readable_conversation,
    writable_conversation,
)
from .dialects import dialect_for
from .protocols import EventStoreProtocol
from .rules.events import (  # re-exported: these rules moved to agent_persistence/stores/rules/events.py
    EVENT_KEYS as EVENT_KEYS,
    IDLE_EVENT as IDLE_EVENT,
    RUNNING_EVENT as RUNNING_EVENT,
    STOP_REASON_MAX_LENGTH as STOP_REASON_MAX_LENGTH,
    TYPE_MAX_LENGTH as TYPE_MAX_LENGTH,
    _CleanEvent as _CleanEvent,
    _check_stop_reason as _check_stop_reason,
    _clean_event as _clean_event,
)
from .rules.events import (
    EventPage,
    EventSummary,
    _clean_batch,
    _clean_seq,
    _clean_types,
    _has_status_event,
    _is_list,
    _parseable_ids,
    _stop_reason_after,
)
from .twins import twins_of


class EventStore(twins_of(EventStoreProtocol)):
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
            # One statement on PostgreSQL; it writes nothing when the scope does not own the conversation.
            rows = dialect_for().append_events(scope, pk, batch, timezone.now(), stop_reason=stop_reason,
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
