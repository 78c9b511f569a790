"""Serializers of a conversation's files: the record out, the multipart upload in."""

from __future__ import annotations

from rest_framework import serializers

from .base import AwareDateTimeField, StrictSerializer, page_serializer


class FileSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    conversation_id = serializers.UUIDField()
    message_id = serializers.UUIDField(allow_null=True)
    uploader = serializers.CharField(allow_null=True)
    agent = serializers.CharField(allow_null=True)
    name = serializers.CharField()
    content_type = serializers.CharField()
    size = serializers.IntegerField()
    expires_at = serializers.DateTimeField(allow_null=True)
    created_at = serializers.DateTimeField()


FilePageSerializer = page_serializer(FileSerializer, "FilePageSerializer")


class FileUploadInputSerializer(StrictSerializer):
    """A multipart/form-data upload (a form has no null: leave a field out instead)."""

    file = serializers.FileField(allow_empty_file=True, use_url=False, help_text="The content; its name and type are kept.")
    message_id = serializers.UUIDField(required=False, help_text="A message of the conversation.")
    expires_at = AwareDateTimeField(required=False, help_text="Purged after this time.")
