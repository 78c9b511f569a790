"""Admin of background tasks."""

from __future__ import annotations

from django.contrib import admin

from .. import models
from .base import URL_FIELDS


@admin.register(models.Task)
class TaskAdmin(admin.ModelAdmin):
    formfield_overrides = URL_FIELDS
    list_display = ("title", "tenant", "owner", "conversation", "status", "created_at", "updated_at")
    list_filter = ("status", "tenant")
    list_select_related = ("conversation",)
    search_fields = ("id", "title", "owner", "conversation__id")
    readonly_fields = ("id", "created_at")
