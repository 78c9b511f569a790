"""The Django admin for every model of the app.

Secrets (OAuth tokens, PKCE verifiers, client secrets) are never listed,
shown in a form or searchable: their admins exclude the fields and show only
whether a value is set.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import URLField
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from . import models
from .exceptions import AgentPersistenceError
from .runtime.turns import force_release, stop_turn_now
from .stores import run_store
from .stores.supervision import status_of


def live_status(row: models.TurnSupervision | None) -> str:
    """alive / dead / done / errored / idle, with heartbeat age, epoch and owner replica, as of now."""
    status = status_of(row, now=timezone.now())
    if row is None:
        return "idle"
    return f"{status.state} (heartbeat {status.heartbeat_age:.1f} s ago, epoch {status.epoch}, replica {status.replica or '?'})"


# Callback and endpoint URLs are https unless they say otherwise (Django 6's default, today).
URL_FIELDS = {URLField: {"assume_scheme": "https"}}


class MessageInline(admin.TabularInline):
    model = models.Message
    fields = ("position", "role", "content", "name", "tool_call_id", "created_at")
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = True
    ordering = ("position",)


class RunInline(admin.TabularInline):
    model = models.Run
    fk_name = "conversation"
    fields = ("id", "name", "status", "message_id", "parent", "epoch", "started_at", "finished_at")
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = True


class InterruptInline(admin.TabularInline):
    model = models.Interrupt
    fields = ("id", "kind", "status", "run", "requested_at", "resolved_at", "resolved_by", "expires_at")
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = True


class EventInline(admin.TabularInline):
    model = models.Event
    fields = ("seq", "type", "data", "run_id", "created_at")
    readonly_fields = fields
    extra = 0
    can_delete = False
    ordering = ("seq",)


@admin.register(models.Conversation)
class ConversationAdmin(admin.ModelAdmin):
    list_display = ("__str__", "tenant", "owner", "agent", "turn", "last_turn_status", "shared", "pinned", "version", "updated_at")
    list_filter = ("last_turn_status", "shared", "pinned", "agent", "tenant")
    search_fields = ("id", "title", "owner", "agent")
    readonly_fields = (
        "id",
        "turn",
        "version",
        "epoch",
        "pinned",
        "next_position",
        "last_event_seq",
        "event_stop_reason",
        "created_at",
    )
    date_hierarchy = "created_at"
    inlines = [MessageInline, RunInline, InterruptInline, EventInline]
    actions = ["cancel_turns", "force_release_turns"]

    def get_queryset(self, request: Any) -> Any:
        return super().get_queryset(request).select_related("supervision")

    @admin.display(description=_("live turn"))
    def turn(self, obj: models.Conversation) -> str:
        return live_status(getattr(obj, "supervision", None))

    @admin.action(description=_("Cancel the running turn (keeps the partial answer)"))
    def cancel_turns(self, request: Any, queryset: Any) -> None:
        for conversation in queryset:
            try:
                stop_turn_now(conversation.pk)
            except AgentPersistenceError as error:
                self.message_user(request, f"{conversation}: {error.message}", messages.WARNING)
            else:
                self.message_user(request, f"{conversation}: stop requested.", messages.SUCCESS)

    @admin.action(description=_("Force release (fence the producer, end the turn as errored)"))
    def force_release_turns(self, request: Any, queryset: Any) -> None:
        released = sum(force_release(conversation.pk) for conversation in queryset)
        self.message_user(request, f"Released {released} conversation(s).", messages.SUCCESS)


@admin.register(models.Message)
class MessageAdmin(admin.ModelAdmin):
    list_display = ("id", "conversation", "position", "role", "created_at")
    list_filter = ("role",)
    search_fields = ("id", "conversation__id", "tool_call_id")
    readonly_fields = ("id", "conversation", "position", "created_at")
    list_select_related = ("conversation",)


@admin.register(models.Run)
class RunAdmin(admin.ModelAdmin):
    list_display = ("id", "conversation", "name", "status", "epoch", "started_at", "finished_at")
    list_filter = ("status",)
    search_fields = ("id", "conversation__id", "message_id", "name")
    readonly_fields = ("id", "conversation", "message_id", "parent", "epoch", "started_at")
    raw_id_fields = ("parent",)
    actions = ["abort_stuck_runs"]

    @admin.action(description=_("Mark stuck runs aborted"))
    def abort_stuck_runs(self, request: Any, queryset: Any) -> None:
        aborted = sum(run_store().abort_stuck(run.pk) for run in queryset)
        self.message_user(request, f"Aborted {aborted} run(s).", messages.SUCCESS)


@admin.register(models.Interrupt)
class InterruptAdmin(admin.ModelAdmin):
    list_display = ("id", "conversation", "kind", "status", "requested_at", "resolved_at", "expires_at")
    list_filter = ("kind", "status")
    search_fields = ("id", "conversation__id", "run__id")
    readonly_fields = ("id", "run", "conversation", "requested_at", "epoch")


@admin.register(models.TurnSupervision)
class TurnSupervisionAdmin(admin.ModelAdmin):
    list_display = ("conversation", "live", "status", "heartbeat_at", "message_id", "epoch", "replica")
    list_filter = ("status",)
    search_fields = ("conversation__id", "message_id", "replica")
    readonly_fields = ("conversation", "live", "status", "heartbeat_at", "message_id", "run_id", "epoch", "replica", "claimed_at")

    @admin.display(description=_("live status"))
    def live(self, obj: models.TurnSupervision) -> str:
        return live_status(obj)


@admin.register(models.StreamRecording)
class StreamRecordingAdmin(admin.ModelAdmin):
    list_display = ("conversation", "message_id", "index", "epoch", "updated_at")
    search_fields = ("conversation__id", "message_id")
    readonly_fields = ("conversation", "message_id", "index", "message", "epoch", "updated_at")


@admin.register(models.AgentCheckpoint)
class AgentCheckpointAdmin(admin.ModelAdmin):
    list_display = ("conversation", "size", "message_id", "epoch", "saved_at")
    search_fields = ("conversation__id",)
    readonly_fields = ("conversation", "state", "size", "message_id", "epoch", "saved_at")


@admin.register(models.Event)
class EventAdmin(admin.ModelAdmin):
    list_display = ("conversation", "seq", "type", "run_id", "created_at")
    list_filter = ("type",)
    search_fields = ("conversation__id", "type")
    readonly_fields = ("conversation", "seq", "type", "data", "run_id", "created_at")


@admin.register(models.Lease)
class LeaseAdmin(admin.ModelAdmin):
    list_display = ("key", "tenant", "holder", "acquired_at", "expires_at", "cancel_requested")
    list_filter = ("cancel_requested", "tenant")
    search_fields = ("key", "holder")


@admin.register(models.StoredFile)
class StoredFileAdmin(admin.ModelAdmin):
    list_display = ("name", "conversation", "content_type", "size", "uploader", "created_at", "expires_at")
    list_filter = ("content_type",)
    search_fields = ("id", "name", "conversation__id", "uploader")
    readonly_fields = ("id", "conversation", "message", "size", "content", "created_at")


@admin.register(models.Task)
class TaskAdmin(admin.ModelAdmin):
    formfield_overrides = URL_FIELDS
    list_display = ("title", "tenant", "owner", "conversation", "status", "created_at", "updated_at")
    list_filter = ("status", "tenant")
    search_fields = ("id", "title", "owner", "conversation__id")
    readonly_fields = ("id", "created_at")


class SecretPresenceMixin:
    """Shows whether each secret field is set, never its value."""

    secret_fields: tuple[str, ...] = ()

    def get_readonly_fields(self, request: Any, obj: Any = None) -> Any:
        return tuple(super().get_readonly_fields(request, obj)) + tuple(f"has_{name}" for name in self.secret_fields)

    def get_exclude(self, request: Any, obj: Any = None) -> Any:
        return tuple(super().get_exclude(request, obj) or ()) + self.secret_fields


def _presence(field_name: str) -> Any:
    def has_secret(self: Any, obj: Any) -> bool:
        return bool(obj and getattr(obj, field_name))

    has_secret.boolean = True  # type: ignore[attr-defined]
    has_secret.short_description = _("%s set") % field_name.replace("_", " ")  # type: ignore[attr-defined]
    return has_secret


@admin.register(models.McpIntegration)
class McpIntegrationAdmin(SecretPresenceMixin, admin.ModelAdmin):
    formfield_overrides = URL_FIELDS
    secret_fields = ("pending_code_verifier", "access_token", "refresh_token")
    list_display = ("server", "tenant", "user", "has_access_token", "has_refresh_token", "token_expires_at", "pending_expires_at")
    search_fields = ("server", "user")
    list_filter = ("server", "tenant")
    readonly_fields = ("id", "pending_state_digest", "created_at")
    has_pending_code_verifier = _presence("pending_code_verifier")
    has_access_token = _presence("access_token")
    has_refresh_token = _presence("refresh_token")


@admin.register(models.McpClientInfo)
class McpClientInfoAdmin(SecretPresenceMixin, admin.ModelAdmin):
    secret_fields = ("client_secret",)
    list_display = ("server", "tenant", "client_id", "has_client_secret", "updated_at")
    search_fields = ("server", "client_id")
    readonly_fields = ("id", "created_at")
    has_client_secret = _presence("client_secret")
