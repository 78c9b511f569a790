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

from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from ..exceptions import NotFound
from ..models import Activity
from ..scope import Scope
from .base import readable_conversation, writable_conversation
from .fencing import fence
from .protocols import ActivityStoreProtocol
from .rules.activities import (  # re-exported: these rules moved to agent_persistence/stores/rules/activities.py
    ACTIVITY_FIELDS as ACTIVITY_FIELDS,
    MAX_ACTIVITY_TYPE_LENGTH as MAX_ACTIVITY_TYPE_LENGTH,
    clean_activity_type as clean_activity_type,
    _optional_id as _optional_id,
)
from .rules.activities import activity_as_json as activity_as_json
from .rules.activities import (
    clean_activity,
    clean_activity_list,
    clean_message_filter,
    full_list_refused,
    max_activities,
)
from .twins import twins_of


class ActivityStore(twins_of(ActivityStoreProtocol)):
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
