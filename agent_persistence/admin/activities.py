"""Admins of activity rows and metadata entries: browse only, since both change through their stores alone."""

from __future__ import annotations

from django.contrib import admin

from .. import models
from .base import ReadOnlyAdmin


@admin.register(models.Activity)
class ActivityAdmin(ReadOnlyAdmin):
    list_display = ("activity_type", "conversation", "position", "revision", "message_id", "updated_at")
    list_filter = ("activity_type",)
    list_select_related = ("conversation",)
    search_fields = ("activity_id", "activity_type", "conversation__id", "message_id")
    ordering = ("-updated_at",)


@admin.register(models.MetadataEntry)
class MetadataEntryAdmin(ReadOnlyAdmin):
    list_display = ("namespace", "key", "tenant", "size", "updated_at")
    list_filter = ("namespace",)
    search_fields = ("namespace", "key", "tenant")
