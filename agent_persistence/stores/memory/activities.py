"""The in-memory activity store: each conversation's activity rows as one list, replaced or written row by row."""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from ...models import Activity
from ...scope import Scope
from ..protocols import ActivityStoreProtocol
from ..rules.activities import (
    clean_activity,
    clean_activity_list,
    clean_message_filter,
    full_list_refused,
    max_activities,
)
from ..rules.base import lookup_id
from ..rules.fencing import clean_lease_epoch
from ..twins import twins_of
from .database import DEFAULT_DATABASE, MemoryDatabase, clone


class MemoryActivityStore(twins_of(ActivityStoreProtocol)):
    """The activity rows of each conversation, in a :class:`MemoryDatabase`."""

    def __init__(self, database: MemoryDatabase | None = None) -> None:
        self.db = database or DEFAULT_DATABASE

    def list(self, scope: Scope, conversation_id: Any, *, message_id: Any = None) -> list[Activity]:
        wanted = clean_message_filter(message_id)
        with self.db.lock:
            conversation = self.db.readable_conversation(scope, conversation_id)
            rows = self.db.activities.get(conversation.pk, [])
            return [clone(row) for row in rows if wanted is None or row.message_id == wanted]

    def save(self, scope: Scope, conversation_id: Any, activities: list[dict[str, Any]]) -> list[Activity]:
        rows = clean_activity_list(activities)
        now = timezone.now()
        with self.db.lock:
            conversation = self.db.writable_conversation(scope, conversation_id)
            stored = {row.activity_id: row for row in self.db.activities.get(conversation.pk, [])}
            saved = []
            for position, row in enumerate(rows):
                previous = stored.get(row["activity_id"])
                saved.append(Activity(
                    conversation_id=conversation.pk,
                    position=position,
                    revision=1 if previous is None else previous.revision + 1,
                    created_at=now if previous is None else previous.created_at,
                    updated_at=now,
                    **row,
                ))
            self.db.activities[conversation.pk] = saved
            return [clone(row) for row in saved]

    def put(self, scope: Scope, conversation_id: Any, activity: dict[str, Any], *, epoch: int | None = None) -> Activity:
        row = clean_activity(activity)
        now = timezone.now()
        with self.db.lock:
            if epoch is not None:
                self.db.fence(lookup_id(conversation_id), clean_lease_epoch(epoch, minimum=0), now)
            conversation = self.db.writable_conversation(scope, conversation_id)
            rows = self.db.activities.setdefault(conversation.pk, [])
            for stored in rows:
                if stored.activity_id == row["activity_id"]:
                    for name, value in row.items():
                        setattr(stored, name, value)
                    stored.revision += 1
                    stored.updated_at = now
                    return clone(stored)
            if len(rows) >= max_activities():
                raise full_list_refused()
            created = Activity(conversation_id=conversation.pk, position=len(rows), created_at=now, updated_at=now, **row)
            rows.append(created)
            return clone(created)
