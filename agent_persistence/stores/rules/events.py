"""The backend-neutral rules of the events concern: what both store families check and build the same way.

The ORM store (:mod:`agent_persistence.stores.events`) and its in-memory twin
import these; nothing here reads or writes a table.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from ...conf import app_settings
from ...exceptions import Validation
from ...models import Conversation, Event
from .base import clean_object, clean_text, parse_id

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
