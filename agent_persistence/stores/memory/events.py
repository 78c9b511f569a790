"""The in-memory event store: each conversation's log, numbered from its counter under the family's lock."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from django.utils import timezone

from ...conf import app_settings
from ...exceptions import Validation
from ...models import Event
from ...scope import Scope
from ..protocols import EventStoreProtocol
from ..rules.base import check_scope, clean_datetime, clean_order, clean_paging
from ..rules.events import (
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
from ..twins import twins_of
from .database import DEFAULT_DATABASE, MemoryDatabase, clone


class MemoryEventStore(twins_of(EventStoreProtocol)):
    """Append, read, summarise and prune the per-conversation event log, in a :class:`MemoryDatabase`."""

    def __init__(self, database: MemoryDatabase | None = None) -> None:
        self.db = database or DEFAULT_DATABASE

    def append(
        self, scope: Scope, conversation_id: Any, events: list[dict[str, Any]], *, run_id: Any = None
    ) -> list[Event]:
        check_scope(scope)
        batch = _clean_batch(events, run_id)
        now = timezone.now()
        with self.db.lock:
            conversation = self.db.writable_conversation(scope, conversation_id)
            if not batch:
                return []
            if _has_status_event(batch):
                conversation.event_stop_reason = _stop_reason_after(None, batch)
            log = self.db.events.setdefault(conversation.pk, [])
            rows = []
            for event in batch:
                conversation.last_event_seq += 1
                self.db.event_ids += 1
                row = event.row(conversation.pk, conversation.last_event_seq)
                row.id, row.created_at = self.db.event_ids, now
                rows.append(row)
            log.extend(rows)
            return [clone(row) for row in rows]

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
        with self.db.lock:
            conversation = self.db.readable_conversation(scope, conversation_id)
        after = _clean_seq(after, "after")
        before = None if before is None else _clean_seq(before, "before")
        type_names = _clean_types(types)
        limit, _ = clean_paging(limit, 0)
        order = clean_order(order, "asc")
        with self.db.lock:
            rows = [
                row
                for row in self.db.events.get(conversation.pk, [])
                if row.seq > after and (before is None or row.seq < before) and (type_names is None or row.type in type_names)
            ]
            if order == "desc":
                rows.reverse()
            events = [clone(row) for row in rows[:limit]]
        return EventPage(events=events, has_more=len(rows) > limit, last_seq=events[-1].seq if events else after)

    def summary(self, scope: Scope, conversation_ids: list[Any]) -> dict[uuid.UUID, EventSummary]:
        check_scope(scope)
        if not _is_list(conversation_ids):
            raise Validation("conversation_ids must be a list.", field="conversation_ids")
        if len(conversation_ids) > app_settings.MAX_PAGE_SIZE:
            raise Validation(
                f"At most {app_settings.MAX_PAGE_SIZE} conversations per summary.", field="conversation_ids"
            )
        summaries = {}
        with self.db.lock:
            for pk in _parseable_ids(conversation_ids):
                conversation = self.db.conversations.get(pk)
                if conversation is not None and self.db.may_read(scope, conversation):
                    summaries[pk] = EventSummary(
                        last_seq=conversation.last_event_seq, stop_reason=conversation.event_stop_reason
                    )
        return summaries

    def prune(self, *, before: datetime, limit: int | None = None) -> int:
        cutoff = clean_datetime(before, "before")
        if cutoff is None:
            raise Validation("before is required.", field="before")
        if limit is None:
            limit = app_settings.SWEEP_BATCH_SIZE
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise Validation("limit must be a whole number, 1 or more.", field="limit")
        with self.db.lock:
            oldest = sorted(
                (row for log in self.db.events.values() for row in log if row.created_at < cutoff),
                key=lambda row: (row.created_at, row.id),
            )[:limit]
            doomed = {id(row) for row in oldest}
            for pk, log in self.db.events.items():
                self.db.events[pk] = [row for row in log if id(row) not in doomed]
            return len(oldest)
