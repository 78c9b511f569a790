"""Admins of the runtime rows: runs, interrupts, supervision, recordings, checkpoints, events, leases.

All read-only (:class:`~.base.ReadOnlyAdmin`): the stores write these rows
under fencing and "answered exactly once", and a form would bypass both. The
operator actions are the only writes. The supervision admin also carries the
dashboard of the app's index page (see :meth:`TurnSupervisionAdmin.get_model_perms`).
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext_lazy as _

from .. import models
from . import actions
from .base import ReadOnlyAdmin
from .dashboard import LazyDashboard
from .display import compact_json, live_status_html, message_html, pretty_json, short_id
from .filters import LiveStatusFilter

#: Characters of a checkpoint's JSON shown on its page (a state may be megabytes).
CHECKPOINT_PREVIEW = 20_000


def conversation_link(conversation: models.Conversation) -> SafeString:
    """The conversation's title (or "untitled") and short id, linking to its page."""
    url = reverse("admin:agent_persistence_conversation_change", args=[conversation.pk])
    return format_html(
        '<a class="ap-nowrap" href="{}">{} <span class="ap-id">{}</span></a>', url, conversation.title or _("untitled"), short_id(conversation.pk)
    )


class ConversationColumnMixin:
    """A ``conversation_column`` for rows that belong to a conversation."""

    @admin.display(description=_("conversation"), ordering="conversation__created_at")
    def conversation_column(self, obj: Any) -> SafeString:
        return conversation_link(obj.conversation)


@admin.register(models.Run)
class RunAdmin(ConversationColumnMixin, ReadOnlyAdmin):
    list_display = ("run_id", "conversation_column", "name", "status", "epoch", "started_at", "finished_at")
    list_filter = ("status",)
    list_select_related = ("conversation",)
    search_fields = ("id", "conversation__id", "message_id", "name")
    readonly_fields = (
        "id", "conversation", "message_id", "parent", "name", "status", "epoch", "started_at", "finished_at",
        "usage", "error", "detached_since", "cancel_requested", "transcript_json",
    )  # fmt: skip
    exclude = ("transcript",)
    actions = ("abort_stuck_runs",)

    @admin.display(description=_("run"), ordering="id")
    def run_id(self, obj: models.Run) -> str:
        return short_id(obj.pk)

    @admin.display(description=_("transcript"))
    def transcript_json(self, obj: models.Run) -> SafeString:
        return pretty_json(obj.transcript)

    @admin.action(description=_("Mark stuck runs aborted"), permissions=["operate"])
    def abort_stuck_runs(self, request: HttpRequest, queryset: Any) -> None:
        actions.abort_stuck_runs(self, request, queryset)


@admin.register(models.Interrupt)
class InterruptAdmin(ConversationColumnMixin, ReadOnlyAdmin):
    list_display = ("interrupt_id", "conversation_column", "kind", "status", "question", "requested_at", "expires_at")
    list_filter = ("status", "kind")
    list_select_related = ("conversation",)
    search_fields = ("id", "conversation__id", "run__id")
    fields = ("id", "conversation", "run", "kind", "status", "payload_json", "response_json", "requested_at", "resolved_at", "resolved_by", "expires_at", "epoch")
    readonly_fields = fields

    @admin.display(description=_("interrupt"), ordering="id")
    def interrupt_id(self, obj: models.Interrupt) -> str:
        return short_id(obj.pk)

    @admin.display(description=_("question"))
    def question(self, obj: models.Interrupt) -> str:
        return compact_json(obj.payload, 80)

    @admin.display(description=_("payload"))
    def payload_json(self, obj: models.Interrupt) -> SafeString:
        return pretty_json(obj.payload)

    @admin.display(description=_("response"))
    def response_json(self, obj: models.Interrupt) -> SafeString:
        return pretty_json(obj.response)


@admin.register(models.TurnSupervision)
class TurnSupervisionAdmin(ConversationColumnMixin, ReadOnlyAdmin):
    list_display = ("conversation_column", "live", "status", "turn", "epoch", "replica", "heartbeat_at")
    list_filter = (LiveStatusFilter, "replica")
    list_select_related = ("conversation",)
    search_fields = ("conversation__id", "message_id", "replica")
    fields = ("conversation", "live", "status", "heartbeat_at", "message_id", "run_id", "epoch", "replica", "claimed_at")
    readonly_fields = fields
    actions = ("cancel_turns", "force_release_turns")

    def get_model_perms(self, request: HttpRequest) -> dict[str, Any]:
        """Django's permissions, plus the dashboard for those who may see supervision rows.

        The app index template (``admin/agent_persistence/app_index.html``) reads
        ``perms.dashboard`` of this model: the one per-request value a
        ModelAdmin hands that page without a custom AdminSite. It is computed
        only when the template reads it, so the admin's other pages (which
        build the same app list for the sidebar) pay nothing.
        """
        perms: dict[str, Any] = super().get_model_perms(request)
        if self.has_view_permission(request):
            perms["dashboard"] = LazyDashboard()
        return perms

    @admin.display(description=_("live status"))
    def live(self, obj: models.TurnSupervision) -> SafeString:
        return live_status_html(obj)

    @admin.display(description=_("turn"), ordering="message_id")
    def turn(self, obj: models.TurnSupervision) -> str:
        return short_id(obj.message_id)

    @admin.action(description=_("Cancel the running turn (keeps the partial answer)"), permissions=["operate"])
    def cancel_turns(self, request: HttpRequest, queryset: Any) -> None:
        actions.cancel_turns(self, request, queryset.values_list("conversation_id", flat=True))

    @admin.action(description=_("Force release (fence the producer, end the turn as errored)"), permissions=["operate"])
    def force_release_turns(self, request: HttpRequest, queryset: Any) -> None:
        actions.force_release_turns(self, request, queryset.values_list("conversation_id", flat=True))


@admin.register(models.StreamRecording)
class StreamRecordingAdmin(ConversationColumnMixin, ReadOnlyAdmin):
    list_display = ("conversation_column", "turn", "index", "epoch", "updated_at")
    list_select_related = ("conversation",)
    search_fields = ("conversation__id", "message_id")
    fields = ("conversation", "message_id", "index", "epoch", "updated_at", "recorded_message")
    readonly_fields = fields

    @admin.display(description=_("turn"), ordering="message_id")
    def turn(self, obj: models.StreamRecording) -> str:
        return short_id(obj.message_id)

    @admin.display(description=_("message so far"))
    def recorded_message(self, obj: models.StreamRecording) -> SafeString:
        message = obj.message if isinstance(obj.message, dict) else {"content": obj.message}
        return message_html("assistant", message.get("content"), tool_calls=message.get("tool_calls"))


@admin.register(models.AgentCheckpoint)
class AgentCheckpointAdmin(ConversationColumnMixin, ReadOnlyAdmin):
    list_display = ("conversation_column", "size", "turn", "epoch", "saved_at")
    list_select_related = ("conversation",)
    search_fields = ("conversation__id",)
    fields = ("conversation", "size", "message_id", "epoch", "saved_at", "state_json")
    readonly_fields = fields

    @admin.display(description=_("turn"), ordering="message_id")
    def turn(self, obj: models.AgentCheckpoint) -> str:
        return short_id(obj.message_id)

    @admin.display(description=_("state"))
    def state_json(self, obj: models.AgentCheckpoint) -> SafeString:
        return format_html('<pre class="ap-json">{}</pre>', compact_json(obj.state, CHECKPOINT_PREVIEW))


@admin.register(models.Event)
class EventAdmin(ConversationColumnMixin, ReadOnlyAdmin):
    list_display = ("conversation_column", "seq", "type", "summary", "created_at")
    list_filter = ("type",)
    list_select_related = ("conversation",)
    search_fields = ("conversation__id", "type")
    fields = ("conversation", "seq", "type", "run_id", "created_at", "data_json")
    readonly_fields = fields

    @admin.display(description=_("data"))
    def summary(self, obj: models.Event) -> str:
        return compact_json(obj.data, 80)

    @admin.display(description=_("data"))
    def data_json(self, obj: models.Event) -> SafeString:
        return pretty_json(obj.data)


@admin.register(models.Lease)
class LeaseAdmin(ReadOnlyAdmin):
    list_display = ("key", "tenant", "holder", "acquired_at", "expires_at", "cancel_requested")
    list_filter = ("cancel_requested", "tenant")
    search_fields = ("key", "holder")
    readonly_fields = ("tenant", "key", "holder", "acquired_at", "expires_at", "cancel_requested", "metadata")
