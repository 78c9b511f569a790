"""The backend-neutral rules of the activities concern: what both store families check and build the same way.

The ORM store (:mod:`agent_persistence.stores.activities`) and its in-memory twin
import these; nothing here reads or writes a table.
"""

from __future__ import annotations

import uuid
from typing import Any

from ...conf import app_settings
from ...exceptions import Validation
from ...ids import uuid7
from .base import clean_object, clean_text, parse_id

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


def activity_as_json(row: Any) -> dict[str, Any]:
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
