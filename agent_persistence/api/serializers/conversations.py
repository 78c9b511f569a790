"""Serializers of conversations, their messages and their events.

Output serializers read model instances returned by the stores; input
serializers (``*InputSerializer``) derive from StrictSerializer, so unknown
fields are refused with ``unknown_field``. Checks the stores make themselves
(lengths, NUL characters, sizes) are left to them.
"""

from __future__ import annotations

from rest_framework import serializers

from ...models.conversations import LastTurnStatus, Role
from .base import (
    AwareDateTimeField,
    JSONArrayField,
    JSONObjectField,
    StrictBooleanField,
    StrictCharField,
    StrictSerializer,
    page_serializer,
)


class ConversationSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    owner = serializers.CharField(help_text="The user id of the owner.")
    agent = serializers.CharField()
    title = serializers.CharField(allow_null=True)
    metadata = JSONObjectField()
    state = JSONObjectField()
    version = serializers.IntegerField(help_text="+1 on every update; send it back in If-Match.")
    shared = serializers.BooleanField()
    pinned = serializers.BooleanField(help_text='metadata.pinned is true.')
    last_turn_status = serializers.ChoiceField(choices=LastTurnStatus.choices, allow_null=True)
    event_stop_reason = serializers.CharField(allow_null=True)
    last_event_seq = serializers.IntegerField()
    action_due_at = serializers.DateTimeField(allow_null=True)
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


class MessageSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    conversation_id = serializers.UUIDField()
    position = serializers.IntegerField()
    role = serializers.ChoiceField(choices=Role.choices)
    content = serializers.JSONField(allow_null=True)
    name = serializers.CharField(allow_null=True)
    tool_call_id = serializers.CharField(allow_null=True)
    tool_calls = JSONArrayField(allow_null=True)
    files = JSONArrayField(allow_null=True)
    metadata = JSONObjectField()
    usage = JSONObjectField(allow_null=True)
    run_id = serializers.UUIDField(allow_null=True)
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


ConversationPageSerializer = page_serializer(ConversationSerializer, "ConversationPageSerializer")
MessagePageSerializer = page_serializer(MessageSerializer, "MessagePageSerializer")


class ConversationDetailSerializer(ConversationSerializer):
    messages = MessagePageSerializer(help_text="A page of the conversation's messages.")


class EventSerializer(serializers.Serializer):
    seq = serializers.IntegerField()
    type = serializers.CharField()
    data = JSONObjectField()
    run_id = serializers.UUIDField(allow_null=True)
    created_at = serializers.DateTimeField()


class EventListSerializer(serializers.Serializer):
    events = EventSerializer(many=True)
    has_more = serializers.BooleanField()
    last_seq = serializers.IntegerField(help_text="Pass back as `after` (or `before` with order=desc).")


# -- input ------------------------------------------------------------------------------------


class ConversationCreateInputSerializer(StrictSerializer):
    id = serializers.UUIDField(required=False, help_text="A client-chosen id; default a new UUIDv7.")
    agent = StrictCharField(required=False, allow_blank=True, max_length=255)
    title = StrictCharField(required=False, allow_null=True, allow_blank=True, max_length=500)
    metadata = JSONObjectField(required=False, allow_null=True)
    state = JSONObjectField(required=False, allow_null=True)
    shared = StrictBooleanField(required=False)
    action_due_at = AwareDateTimeField(required=False, allow_null=True)


class ConversationUpdateInputSerializer(StrictSerializer):
    agent = StrictCharField(required=False, allow_blank=True, max_length=255)
    title = StrictCharField(required=False, allow_null=True, allow_blank=True, max_length=500)
    metadata = JSONObjectField(required=False, allow_null=True)
    state = JSONObjectField(required=False, allow_null=True)
    shared = StrictBooleanField(required=False)
    action_due_at = AwareDateTimeField(required=False, allow_null=True)


class MessageCreateInputSerializer(StrictSerializer):
    role = serializers.ChoiceField(choices=Role.choices)
    content = serializers.JSONField(allow_null=True)
    id = serializers.UUIDField(required=False, help_text="A client-chosen id; default a new UUIDv7.")
    name = StrictCharField(required=False, allow_null=True, allow_blank=True, max_length=255)
    tool_call_id = StrictCharField(required=False, allow_null=True, allow_blank=True, max_length=255)
    tool_calls = JSONArrayField(required=False, allow_null=True)
    files = JSONArrayField(required=False, allow_null=True)
    metadata = JSONObjectField(required=False, allow_null=True)
    usage = JSONObjectField(required=False, allow_null=True)


class MessageUpdateInputSerializer(StrictSerializer):
    content = serializers.JSONField(required=False, allow_null=True)
    metadata = JSONObjectField(required=False, allow_null=True)
