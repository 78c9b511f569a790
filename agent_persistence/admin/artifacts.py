"""Admin of blobs, artifacts and generation runs: browse only (they change through their stores)."""

from __future__ import annotations

from django.contrib import admin

from .. import models
from .base import ReadOnlyAdmin


@admin.register(models.Blob)
class BlobAdmin(ReadOnlyAdmin):
    list_display = ("key", "tenant", "content_type", "size", "updated_at")
    list_filter = ("content_type",)
    search_fields = ("id", "key")


@admin.register(models.Artifact)
class ArtifactAdmin(ReadOnlyAdmin):
    list_display = ("id", "name", "media_type", "size", "conversation", "run", "generation_run", "created_at")
    list_filter = ("media_type",)
    list_select_related = ("conversation", "run", "generation_run")
    search_fields = ("id", "name", "conversation__id", "run__id", "generation_run__id")


@admin.register(models.GenerationRun)
class GenerationRunAdmin(ReadOnlyAdmin):
    list_display = ("id", "slot", "kind", "status", "provider", "model", "owner", "started_at", "finished_at")
    list_filter = ("kind", "status")
    search_fields = ("id", "slot", "owner", "conversation__id")
