"""Admins of conversations and their transcripts.

A conversation page shows its live turn (judged now), its transcript as text
with tool calls, and its runs, interrupts and events inline, all read-only.
Staff may change only the ``title`` and ``shared`` of a conversation, and that
change goes through the conversation store (``version`` + 1, as the owner's own
update would), so a client's ``If-Match`` still detects it. Deleting goes
through the store too. Everything the runtime writes (``state``,
``last_turn_status``, ``epoch``, counters, messages) is shown, never edited;
conversations are created by their owners, not in the admin.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.utils import flatten_fieldsets
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext_lazy as _

from .. import models
from ..scope import Scope
from ..stores import conversation_store
from . import actions
from .base import ADMIN_CSS, ReadOnlyAdmin, ReadOnlyInline
from .display import compact_json, live_status_html, message_html, message_text, pretty_json, short_id
from .filters import ConversationLiveStatusFilter
from .runtime import conversation_link

#: Messages shown on a conversation's page (the latest ones); the message list has them all.
TRANSCRIPT_LIMIT = 200

#: Runs, interrupts and events shown inline (the latest ones); their lists, filtered by conversation, have them all.
INLINE_LIMIT = 50

#: What staff may change on a conversation; everything else is the owner's or the runtime's.
EDITABLE_CONVERSATION_FIELDS = ("title", "shared")


def owner_scope(conversation: models.Conversation) -> Scope:
    return Scope(tenant=conversation.tenant, user=conversation.owner)


def latest_ids(queryset: Any, conversation: models.Conversation, newest_first: str) -> list[Any]:
    """The ids of the conversation's latest INLINE_LIMIT rows (a filter the inline formset can refine; a slice it cannot)."""
    return list(queryset.filter(conversation=conversation).order_by(newest_first).values_list("pk", flat=True)[:INLINE_LIMIT])


class RunInline(ReadOnlyInline):
    model = models.Run
    fk_name = "conversation"
    fields = ("run", "name", "status", "turn", "parent", "epoch", "started_at", "finished_at", "error")
    readonly_fields = fields

    def latest(self, queryset: Any, conversation: models.Conversation) -> Any:
        return queryset.filter(pk__in=latest_ids(queryset, conversation, "-started_at"))

    @admin.display(description=_("run"))
    def run(self, obj: models.Run) -> str:
        return short_id(obj.pk)

    @admin.display(description=_("turn"))
    def turn(self, obj: models.Run) -> str:
        return short_id(obj.message_id)


class InterruptInline(ReadOnlyInline):
    model = models.Interrupt
    fields = ("interrupt", "kind", "status", "question", "answer", "requested_at", "resolved_at", "resolved_by", "expires_at")
    readonly_fields = fields

    def latest(self, queryset: Any, conversation: models.Conversation) -> Any:
        return queryset.filter(pk__in=latest_ids(queryset, conversation, "-requested_at"))

    @admin.display(description=_("interrupt"))
    def interrupt(self, obj: models.Interrupt) -> str:
        return short_id(obj.pk)

    @admin.display(description=_("question"))
    def question(self, obj: models.Interrupt) -> str:
        return compact_json(obj.payload, 120)

    @admin.display(description=_("answer"))
    def answer(self, obj: models.Interrupt) -> str:
        return "" if obj.response is None else compact_json(obj.response, 120)


class EventInline(ReadOnlyInline):
    model = models.Event
    fields = ("seq", "type", "summary", "run_id", "created_at")
    readonly_fields = fields
    ordering = ("seq",)
    show_change_link = False

    def latest(self, queryset: Any, conversation: models.Conversation) -> Any:
        return queryset.filter(seq__gt=conversation.last_event_seq - INLINE_LIMIT)

    @admin.display(description=_("data"))
    def summary(self, obj: models.Event) -> str:
        return compact_json(obj.data, 120)


@admin.register(models.Conversation)
class ConversationAdmin(admin.ModelAdmin):
    list_display = ("title_column", "short_id_column", "owner_column", "live_turn")
    list_display_links = ("title_column",)
    list_filter = (ConversationLiveStatusFilter, "last_turn_status", "shared", "agent", "tenant")
    search_fields = ("id", "title", "owner", "agent")
    date_hierarchy = "created_at"
    fieldsets = (
        (None, {"fields": (("title", "shared"), ("owner", "tenant", "agent"), "id")}),
        (_("Turn"), {"fields": ("live_turn", ("last_turn_status", "epoch", "version"), "history", "action_due_at")}),
        (_("Transcript"), {"fields": ("transcript",)}),
        (
            _("Metadata and state"),
            {
                "classes": ("collapse",),
                "fields": ("metadata_json", "state_json", "pinned", "next_position", "last_event_seq", "event_stop_reason", "created_at", "updated_at"),
            },
        ),
    )
    inlines = (RunInline, InterruptInline, EventInline)
    actions = ("cancel_turns", "force_release_turns")

    class Media:
        css = ADMIN_CSS

    def get_queryset(self, request: HttpRequest) -> Any:
        return super().get_queryset(request).select_related("supervision")

    def get_formset_kwargs(self, request: HttpRequest, obj: Any, inline: Any, prefix: str) -> dict[str, Any]:
        """Inline only the latest runs, interrupts and events: a long conversation has thousands."""
        kwargs: dict[str, Any] = super().get_formset_kwargs(request, obj, inline, prefix)
        if obj is not None and obj.pk is not None and hasattr(inline, "latest"):
            kwargs["queryset"] = inline.latest(kwargs["queryset"], obj)
        return kwargs

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return [name for name in flatten_fieldsets(self.fieldsets) if name not in EDITABLE_CONVERSATION_FIELDS]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # a conversation is created by its owner (the API), never on their behalf

    # -- list columns -------------------------------------------------------------------------

    @admin.display(description=_("title"), ordering="title")
    def title_column(self, obj: models.Conversation) -> str:
        return obj.title or "(untitled)"

    @admin.display(description=_("id"), ordering="id")
    def short_id_column(self, obj: models.Conversation) -> SafeString:
        return format_html('<span class="ap-id" title="{}">{}</span>', obj.pk, short_id(obj.pk))

    @admin.display(description=_("owner"), ordering="owner")
    def owner_column(self, obj: models.Conversation) -> SafeString:
        if obj.tenant:
            return format_html('<span class="ap-nowrap">{} <span class="ap-tenant">@ {}</span></span>', obj.owner, obj.tenant)
        return format_html('<span class="ap-nowrap">{}</span>', obj.owner)

    @admin.display(description=_("turn"))
    def live_turn(self, obj: models.Conversation) -> SafeString:
        return live_status_html(getattr(obj, "supervision", None), outcome=obj.last_turn_status)

    # -- detail fields ------------------------------------------------------------------------

    @admin.display(description=_("transcript"))
    def transcript(self, obj: models.Conversation) -> SafeString:
        messages = obj.messages.order_by("-position")[:TRANSCRIPT_LIMIT]
        rows = [
            (message.role, short_id(message.pk), message.position, reverse("admin:agent_persistence_message_change", args=[message.pk]),
             message_html(message.role, message.content, name=message.name, tool_call_id=message.tool_call_id, tool_calls=message.tool_calls))
            for message in reversed(list(messages))
        ]  # fmt: skip
        if not rows:
            return format_html('<p class="ap-empty">{}</p>', _("No messages yet."))
        body = format_html_join(
            "", '<li class="ap-turn ap-role-{0}"><a class="ap-role" href="{3}" title="#{2}, {1}">{0}</a>{4}</li>', rows
        )
        total = obj.messages.count()
        more = ""
        if total > len(rows):
            url = reverse("admin:agent_persistence_message_changelist") + f"?conversation__id__exact={obj.pk}"
            more = format_html('<p><a href="{}">{}</a></p>', url, _("The last %(shown)d of %(total)d messages: see all") % {"shown": len(rows), "total": total})
        return format_html('{}<ol class="ap-transcript">{}</ol>', more, body)

    @admin.display(description=_("runs, interrupts, events"))
    def history(self, obj: models.Conversation) -> SafeString:
        """How many of each the conversation holds, each linking to all of them."""
        links = []
        for model in (models.Run, models.Interrupt, models.Event):
            url = reverse(f"admin:agent_persistence_{model._meta.model_name}_changelist") + f"?conversation__id__exact={obj.pk}"
            count = model.objects.filter(conversation=obj).count()
            links.append((url, count, model._meta.verbose_name if count == 1 else model._meta.verbose_name_plural))
        body = format_html_join(" · ", '<a href="{}">{} {}</a>', links)
        return format_html("{} <small>({})</small>", body, _("below: the latest %(limit)d of each") % {"limit": INLINE_LIMIT})

    @admin.display(description=_("metadata"))
    def metadata_json(self, obj: models.Conversation) -> SafeString:
        return pretty_json(obj.metadata)

    @admin.display(description=_("state"))
    def state_json(self, obj: models.Conversation) -> SafeString:
        return pretty_json(obj.state)

    # -- writes: through the store --------------------------------------------------------------

    def save_model(self, request: HttpRequest, obj: models.Conversation, form: Any, change: bool) -> None:
        changes = {name: form.cleaned_data[name] for name in form.changed_data if name in EDITABLE_CONVERSATION_FIELDS}
        if changes:
            updated = conversation_store().update(owner_scope(obj), obj.pk, **changes)
            obj.version, obj.updated_at = updated.version, updated.updated_at

    def delete_model(self, request: HttpRequest, obj: models.Conversation) -> None:
        conversation_store().delete(owner_scope(obj), obj.pk)

    def delete_queryset(self, request: HttpRequest, queryset: Any) -> None:
        for conversation in queryset:
            self.delete_model(request, conversation)

    def get_deleted_objects(self, objs: Any, request: HttpRequest) -> Any:
        """Read-only rows a conversation owns (messages, runs, events ...) go with it.

        Their admins delete nothing, so Django would refuse the conversation's
        deletion for want of their delete permission.
        """
        to_delete, model_count, perms_needed, protected = super().get_deleted_objects(objs, request)
        owned = {model._meta.verbose_name for model, model_admin in self.admin_site._registry.items() if isinstance(model_admin, ReadOnlyAdmin)}
        return to_delete, model_count, perms_needed - owned, protected

    # -- operator actions -----------------------------------------------------------------------

    @admin.action(description=_("Cancel the running turn (keeps the partial answer)"), permissions=["change"])
    def cancel_turns(self, request: HttpRequest, queryset: Any) -> None:
        actions.cancel_turns(self, request, queryset.values_list("pk", flat=True))

    @admin.action(description=_("Force release (fence the producer, end the turn as errored)"), permissions=["change"])
    def force_release_turns(self, request: HttpRequest, queryset: Any) -> None:
        actions.force_release_turns(self, request, queryset.values_list("pk", flat=True))


@admin.register(models.Message)
class MessageAdmin(ReadOnlyAdmin):
    list_display = ("message_id", "conversation_column", "position", "role", "preview", "created_at")
    list_filter = ("role",)
    list_select_related = ("conversation",)
    search_fields = ("id", "conversation__id", "tool_call_id")
    fields = ("id", "conversation", "position", "role", "rendered", "name", "tool_call_id", "run", "files", "metadata", "usage", "created_at", "updated_at")
    readonly_fields = fields

    @admin.display(description=_("message"), ordering="id")
    def message_id(self, obj: models.Message) -> str:
        return short_id(obj.pk)

    @admin.display(description=_("conversation"), ordering="conversation__created_at")
    def conversation_column(self, obj: models.Message) -> SafeString:
        return conversation_link(obj.conversation)

    @admin.display(description=_("text"))
    def preview(self, obj: models.Message) -> str:
        text = message_text(obj.content).replace("\n", " ")
        calls = len(obj.tool_calls) if isinstance(obj.tool_calls, list) else 0
        suffix = f" [+{calls} tool call{'s' if calls != 1 else ''}]" if calls else ""
        return (text[:99] + "…" if len(text) > 100 else text) + suffix

    @admin.display(description=_("content"))
    def rendered(self, obj: models.Message) -> SafeString:
        return message_html(obj.role, obj.content, name=obj.name, tool_call_id=obj.tool_call_id, tool_calls=obj.tool_calls)
