"""Serializers of artifacts (records out) and generation runs (records out, create and patch in)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from ...statuses import GenerationKind, GenerationStatus
from .base import AwareDateTimeField, JSONObjectField, StrictCharField, StrictSerializer, page_serializer


class ArtifactSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    run_id = serializers.SerializerMethodField(help_text="The chat run or generation run that made it.")
    run_kind = serializers.SerializerMethodField(help_text='"chat" or "generation".')
    conversation_id = serializers.UUIDField(allow_null=True)
    name = serializers.CharField()
    media_type = serializers.CharField()
    size = serializers.IntegerField(allow_null=True, help_text="In bytes; null for a record whose size is not known.")
    blob_key = serializers.CharField(
        help_text="A record-only artifact's blob key (its bytes are that blob's); empty when the artifact owns its bytes."
    )
    source_url = serializers.CharField(help_text="A record-only artifact's bytes hosted elsewhere; empty otherwise.")
    metadata = JSONObjectField()
    created_at = serializers.DateTimeField()

    @extend_schema_field(OpenApiTypes.UUID)
    def get_run_id(self, artifact: Any) -> str:
        return str(artifact.source_run_id)

    @extend_schema_field({"type": "string", "enum": ["chat", "generation"]})
    def get_run_kind(self, artifact: Any) -> str:
        return "chat" if artifact.run_id is not None else "generation"

ArtifactPageSerializer = page_serializer(ArtifactSerializer, "ArtifactPageSerializer")


class GenerationRunSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    slot = serializers.CharField(help_text="What the runs fill (TanStack's generation threadId).")
    kind = serializers.ChoiceField(choices=GenerationKind.choices)
    provider = serializers.CharField()
    model = serializers.CharField()
    conversation_id = serializers.UUIDField(allow_null=True)
    status = serializers.ChoiceField(choices=GenerationStatus.choices)
    started_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)
    error = JSONObjectField(allow_null=True)
    result = serializers.JSONField(allow_null=True, help_text="Result metadata; the bytes are the run's artifacts.")
    usage = JSONObjectField()
    metadata = JSONObjectField()
    artifacts = serializers.ListField(
        source="artifact_refs", child=JSONObjectField(),
        help_text="Refs to what the run made (TanStack's artifacts), as the caller wrote them.",
    )


class GenerationRunCreateInputSerializer(StrictSerializer):
    id = serializers.UUIDField(help_text="The caller's run id: a second create with it returns the stored run.")
    slot = StrictCharField(max_length=255)
    kind = serializers.ChoiceField(choices=GenerationKind.choices)
    provider = StrictCharField(required=False, allow_blank=True, max_length=255)
    model = StrictCharField(required=False, allow_blank=True, max_length=255)
    conversation_id = serializers.UUIDField(required=False, help_text="A conversation of the caller to file it in.")
    started_at = AwareDateTimeField(required=False, help_text="For imports; default now.")
    metadata = JSONObjectField(required=False)


class GenerationRunUpdateInputSerializer(StrictSerializer):
    status = serializers.ChoiceField(choices=GenerationStatus.choices, required=False)
    finished_at = AwareDateTimeField(required=False, allow_null=True, help_text="Default: now, when it finishes.")
    error = JSONObjectField(required=False, allow_null=True)
    result = serializers.JSONField(required=False, allow_null=True)
    usage = JSONObjectField(required=False)
    metadata = JSONObjectField(required=False)
    artifacts = serializers.ListField(
        child=JSONObjectField(), required=False, max_length=1000,
        help_text="Refs to what the run made (a list of objects, replaced whole).",
    )
