"""Serializers of tasks: the task out, creation, changes, comments and the result in."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from ...models.tasks import TaskStatus
from .base import JSONArrayField, JSONObjectField, StrictCharField, StrictSerializer, page_serializer


class TaskSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    conversation_id = serializers.UUIDField(allow_null=True)
    agent = serializers.CharField(allow_null=True)
    title = serializers.CharField()
    description = serializers.CharField(allow_null=True)
    status = serializers.ChoiceField(choices=TaskStatus.choices)
    comments = JSONArrayField(help_text='[{"id", "text", "author", "created_at"}], oldest first.')
    callback_url = serializers.CharField(allow_null=True)
    metadata = JSONObjectField()
    error = serializers.JSONField(allow_null=True)
    result = serializers.JSONField(allow_null=True)
    result_at = serializers.DateTimeField(allow_null=True)
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


TaskPageSerializer = page_serializer(TaskSerializer, "TaskPageSerializer")


class TaskResultSerializer(serializers.Serializer):
    result = serializers.JSONField(allow_null=True)
    result_at = serializers.DateTimeField(allow_null=True)


#: What the task store accepts as a callback: an http or https URL with a host name.
CALLBACK_URL_PATTERN = r"^https?://[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.[A-Za-z]{2,63}(/[A-Za-z0-9._~-]*)*$"


@extend_schema_field({"type": "string", "format": "uri", "pattern": CALLBACK_URL_PATTERN, "maxLength": 2000})
class CallbackURLField(StrictCharField):
    """The task's callback: an http or https URL (the store checks it; the schema says so)."""


class TaskCreateInputSerializer(StrictSerializer):
    title = StrictCharField(max_length=500)
    description = StrictCharField(required=False, allow_null=True, allow_blank=True)
    conversation_id = serializers.UUIDField(required=False, allow_null=True)
    agent = StrictCharField(required=False, allow_null=True, allow_blank=True, max_length=255)
    status = serializers.ChoiceField(choices=TaskStatus.choices, required=False)
    callback_url = CallbackURLField(required=False, allow_null=True, max_length=2000)
    metadata = JSONObjectField(required=False, allow_null=True)


class TaskUpdateInputSerializer(StrictSerializer):
    title = StrictCharField(required=False, max_length=500)
    description = StrictCharField(required=False, allow_null=True, allow_blank=True)
    conversation_id = serializers.UUIDField(required=False, allow_null=True)
    status = serializers.ChoiceField(choices=TaskStatus.choices, required=False)
    callback_url = CallbackURLField(required=False, allow_null=True, max_length=2000)
    metadata = JSONObjectField(required=False, allow_null=True)
    error = serializers.JSONField(required=False, allow_null=True)


class TaskCommentInputSerializer(StrictSerializer):
    text = StrictCharField()
    author = StrictCharField(required=False, allow_null=True, allow_blank=True, max_length=255)


class TaskResultInputSerializer(StrictSerializer):
    result = serializers.JSONField(allow_null=True, help_text="Any JSON value; null clears the result.")
