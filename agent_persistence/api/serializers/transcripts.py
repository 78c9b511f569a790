"""Serializers of a whole-thread save: ``PUT`` (full overwrite) and ``PATCH`` (merge by id) of a conversation's messages.

The body is ``{"messages": [...], "create"?: bool, "agent"?: str}``; each
message carries the fields of an append plus ``run_id`` and ``created_at`` (a
time the caller gives when it imports history). ``created_at`` is checked by
the store's own :func:`~agent_persistence.stores.times.clean_caller_time`, so
the codes are the same over HTTP as in Python (``naive_time``,
``future_time``, ``invalid_time``).
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from ...models.conversations import Role
from ...stores.times import clean_caller_time
from .base import JSONArrayField, JSONObjectField, StrictBooleanField, StrictCharField, StrictSerializer


@extend_schema_field(OpenApiTypes.DATETIME)
class CallerTimeField(serializers.Field):
    """An ISO 8601 date and time with a zone, not in the future beyond ``IMPORT_CLOCK_SKEW``."""

    def to_internal_value(self, data: Any) -> Any:
        return clean_caller_time(data, field=self.field_name)

    def to_representation(self, value: Any) -> Any:
        return value


class TranscriptMessageInputSerializer(StrictSerializer):
    """One message of a saved thread: an append's fields, its run, and the time it was first written."""

    id = serializers.UUIDField(
        required=False, help_text="A stored id replaces that message; a new one (or none) adds a message."
    )
    role = serializers.ChoiceField(choices=Role.choices)
    content = serializers.JSONField(allow_null=True)
    name = StrictCharField(required=False, allow_null=True, allow_blank=True, max_length=255)
    tool_call_id = StrictCharField(required=False, allow_null=True, allow_blank=True, max_length=255)
    tool_calls = JSONArrayField(required=False, allow_null=True)
    files = JSONArrayField(required=False, allow_null=True)
    metadata = JSONObjectField(required=False, allow_null=True)
    usage = JSONObjectField(required=False, allow_null=True)
    run_id = serializers.UUIDField(required=False, allow_null=True, help_text="A run of this conversation.")
    created_at = CallerTimeField(
        required=False,
        allow_null=True,
        help_text=(
            "When the message was first written (an import); with a zone, at most IMPORT_CLOCK_SKEW seconds "
            "ahead of the server. Left out: a stored message keeps its own, a new one gets the time of the save."
        ),
    )


class TranscriptSaveInputSerializer(StrictSerializer):
    """A whole thread, oldest first, and whether to create the conversation when it does not exist."""

    messages = TranscriptMessageInputSerializer(many=True, help_text="At most MAX_PAGE_SIZE messages.")
    create = StrictBooleanField(
        required=False, help_text="Create the conversation (owned by the caller) when no conversation has this id."
    )
    agent = StrictCharField(
        required=False, allow_blank=True, max_length=255, help_text="The agent of a conversation made by create."
    )

    # PATCH here merges a whole list; it is no partial update, so ``messages`` stays required. DRF and
    # drf-spectacular mark a PATCH body partial by setting this attribute (the schema would then show
    # a "Patched" body with every field optional): it is fixed at False.
    @property
    def partial(self) -> bool:
        return False

    @partial.setter
    def partial(self, value: bool) -> None:
        pass
