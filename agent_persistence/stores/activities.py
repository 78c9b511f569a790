"""The activity store: a conversation's AG-UI activity rows, kept beside (never inside) its transcript.

An activity row (``ACTIVITY_SNAPSHOT`` / ``ACTIVITY_DELTA`` materialised, say
a search progress card) has an ``id`` unique within its conversation, an
``activity_type``, a JSON object ``content`` and its ``metadata``. The rows of
a conversation are one ordered list:

- :meth:`ActivityStore.save` replaces the whole list with exactly the given
  one, in one transaction under the conversation's row lock, so of concurrent
  saves the stored list is exactly one of them, never a mix;
- :meth:`ActivityStore.put` writes one row (a producer's snapshot): it
  replaces the row with that id, or appends it; fenced by the producer's
  epoch when one is given.

Reads follow the conversation's read rules (owner, or anyone of the tenant
when shared); writes are the owner's. Every write raises the row's
``revision``, so a follower never applies an older snapshot over a newer one.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from ..conf import app_settings
from ..exceptions import NotFound, Validation
from ..ids import uuid7
from ..models import Activity
from ..scope import Scope
from .base import async_twin, clean_object, clean_text, parse_id, readable_conversation, writable_conversation
from .fencing import fence

#: The fields an activity given to a save or a put may carry.
ACTIVITY_FIELDS = frozenset({"id", "activity_type", "content", "metadata", "message_id", "run_id"})
MAX_ACTIVITY_TYPE_LENGTH = 255


def max_activities() -> int:
    """The most rows one conversation's list may hold (``MAX_PAGE_SIZE``: a reload returns them in one page)."""
    return int(app_settings.MAX_PAGE_SIZE)


def clean_activity(activity: Any, field_name: str = "activity") -> dict[str, Any]:
    """An activity's fields as they are stored; Validation (or StorageLimit) names what is wrong.

    ``id`` is a new time-ordered UUID when absent; ``content`` and ``metadata``
    are JSON objects (``{}`` when absent) within ``MAX_MESSAGE_BYTES`` each.
    """
    if not isinstance(activity, dict):
        raise Validation(f"{field_name} must be an object.", field=field_name)
    unknown = sorted(set(activity) - ACTIVITY_FIELDS)
    if unknown:
        raise Validation(f"{field_name} has an unknown field {str(unknown[0])[:50]!r}.", field=f"{field_name}.{str(unknown[0])[:50]}")
    limit = app_settings.MAX_MESSAGE_BYTES
    activity_id = activity.get("id")
    return {
        "activity_id": uuid7() if activity_id is None else parse_id(activity_id, f"{field_name}.id"),
        "activity_type": clean_activity_type(activity.get("activity_type"), f"{field_name}.activity_type"),
        "content": clean_object(activity.get("content"), f"{field_name}.content", max_bytes=limit),
        "metadata": clean_object(activity.get("metadata"), f"{field_name}.metadata", max_bytes=limit),
        "message_id": _optional_id(activity.get("message_id"), f"{field_name}.message_id"),
        "run_id": _optional_id(activity.get("run_id"), f"{field_name}.run_id"),
    }


def clean_activity_type(value: Any, field_name: str = "activity_type") -> str:
    text = clean_text(value, field_name, max_length=MAX_ACTIVITY_TYPE_LENGTH)
    assert text is not None
    if not text.strip():
        raise Validation(f"{field_name} may not be blank.", field=field_name)
    return text


def clean_activity_list(activities: Any) -> list[dict[str, Any]]:
    """A whole list to save: at most :func:`max_activities` rows, no id twice."""
    if not isinstance(activities, (list, tuple)):
        raise Validation("activities must be a list.", field="activities")
    if len(activities) > max_activities():
        raise full_list_refused()
    cleaned = [clean_activity(activity, f"activities[{index}]") for index, activity in enumerate(activities)]
    seen: set[uuid.UUID] = set()
    for index, row in enumerate(cleaned):
        if row["activity_id"] in seen:
            raise Validation("An activity id appears twice in the list.", code="duplicate_activity_id",
                             field=f"activities[{index}].id")
        seen.add(row["activity_id"])
    return cleaned


def _optional_id(value: Any, field_name: str) -> uuid.UUID | None:
    return None if value is None else parse_id(value, field_name)


def clean_message_filter(message_id: Any) -> uuid.UUID | None:
    return _optional_id(message_id, "message_id")


def full_list_refused() -> Validation:
    return Validation(f"A conversation holds at most {max_activities()} activities.", code="too_many_activities",
                      field="activities", limit=max_activities())


def activity_as_json(row: Activity) -> dict[str, Any]:
    """An activity row as JSON: what the websocket's ``activity`` frame, the REST API and a reload carry."""
    return {
        "id": str(row.activity_id),
        "activity_type": row.activity_type,
        "content": row.content,
        "metadata": row.metadata,
        "message_id": str(row.message_id) if row.message_id else None,
        "run_id": str(row.run_id) if row.run_id else None,
        "position": row.position,
        "revision": row.revision,
    }


class ActivityStore:
    """The activity rows of each conversation, on the Django ORM."""

    def list(self, scope: Scope, conversation_id: Any, *, message_id: Any = None) -> list[Activity]:
        """The conversation's activities in list order; ``message_id`` keeps one turn's.

        NotFound unless ``scope`` may read the conversation.
        """
        conversation = readable_conversation(scope, conversation_id)
        rows = Activity.objects.filter(conversation=conversation).order_by("position")
        wanted = clean_message_filter(message_id)
        if wanted is not None:
            rows = rows.filter(message_id=wanted)
        return list(rows)

    def save(self, scope: Scope, conversation_id: Any, activities: list[dict[str, Any]]) -> list[Activity]:
        """Replace the conversation's activity list with exactly ``activities``; the stored list.

        One transaction, under the conversation's row lock: a row whose id was
        stored keeps its ``created_at`` and gets the next ``revision``; every
        other stored row is deleted. An invalid list changes nothing.
        """
        rows = clean_activity_list(activities)
        now = timezone.now()
        try:
            with transaction.atomic():
                conversation = writable_conversation(scope, conversation_id, for_update=True)
                stored = {
                    activity_id: (revision, created_at)
                    for activity_id, revision, created_at in Activity.objects.filter(conversation=conversation)
                    .values_list("activity_id", "revision", "created_at")
                }
                Activity.objects.filter(conversation=conversation).delete()
                saved = Activity.objects.bulk_create([
                    Activity(
                        conversation=conversation,
                        position=position,
                        revision=stored.get(row["activity_id"], (0, None))[0] + 1,
                        created_at=stored.get(row["activity_id"], (0, now))[1],
                        updated_at=now,
                        **row,
                    )
                    for position, row in enumerate(rows)
                ])
        except IntegrityError:
            # Foreign keys are checked at commit: the conversation went away meanwhile.
            raise NotFound("No such conversation.") from None
        return saved

    def put(self, scope: Scope, conversation_id: Any, activity: dict[str, Any], *, epoch: int | None = None) -> Activity:
        """Write one activity: replace the stored row with its id, or append it to the list.

        With ``epoch`` (a producer's write) the write is fenced: Fenced, and
        nothing written, once a newer epoch holds the conversation. A new row
        past :func:`max_activities` is Validation("too_many_activities").
        """
        row = clean_activity(activity)
        now = timezone.now()
        try:
            with transaction.atomic():
                if epoch is not None:
                    fence(conversation_id, epoch)  # lock 1 of the order, before the conversation row
                conversation = writable_conversation(scope, conversation_id, for_update=True)
                stored = Activity.objects.filter(conversation=conversation, activity_id=row["activity_id"]).first()
                if stored is not None:
                    for name, value in row.items():
                        setattr(stored, name, value)
                    stored.revision += 1
                    stored.updated_at = now
                    stored.save()
                    return stored
                count = Activity.objects.filter(conversation=conversation).count()
                if count >= max_activities():
                    raise full_list_refused()
                return Activity.objects.create(
                    conversation=conversation, position=count, created_at=now, updated_at=now, **row
                )
        except IntegrityError:
            raise NotFound("No such conversation.") from None

    alist = async_twin("list")
    asave = async_twin("save")
    aput = async_twin("put")
