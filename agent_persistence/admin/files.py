"""Admin of stored file records (their content lives in the configured storage)."""

from __future__ import annotations

from django.contrib import admin

from .. import models


@admin.register(models.StoredFile)
class StoredFileAdmin(admin.ModelAdmin):
    list_display = ("name", "conversation", "content_type", "size", "uploader", "created_at", "expires_at")
    list_filter = ("content_type",)
    list_select_related = ("conversation",)
    search_fields = ("id", "name", "conversation__id", "uploader")
    readonly_fields = ("id", "conversation", "message", "size", "content", "created_at")
