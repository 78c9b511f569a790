"""The API benchmark's baseline: plain Django views that answer the read endpoints with the same JSON.

Each view reads the same rows as the API endpoint it stands for, with the same
access rule (the user's own rows in tenant "", a shared conversation readable),
through ``values()`` and ``JsonResponse``: no DRF, no store, no model
instances. It is what a hand-written Django endpoint costs, served by the same
uvicorn process in the same run (:mod:`benchmarks.urls` mounts it under
``/baseline/``). Date-times are written as DRF writes them (ISO 8601, all six
digits of the microseconds, ``Z`` for UTC), so the bodies are equal, not just
alike: the benchmark checks that before it measures.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db.models import Exists, Q, QuerySet, Subquery
from django.http import Http404, HttpRequest, JsonResponse

from agent_persistence.models import Conversation, Event, Interrupt, Message, Run, StoredFile, Task

CONVERSATION = (
    "id", "owner", "agent", "title", "metadata", "state", "version", "shared", "pinned", "last_turn_status",
    "event_stop_reason", "last_event_seq", "action_due_at", "created_at", "updated_at",
)
MESSAGE = (
    "id", "conversation_id", "position", "role", "content", "name", "tool_call_id", "tool_calls", "files",
    "metadata", "usage", "run_id", "created_at", "updated_at",
)
EVENT = ("seq", "type", "data", "run_id", "created_at")
RUN = (
    "id", "conversation_id", "message_id", "parent_id", "name", "status", "started_at", "finished_at", "usage",
    "error", "detached_since", "cancel_requested", "epoch",
)
INTERRUPT = (
    "id", "run_id", "conversation_id", "kind", "payload", "status", "response", "requested_at", "resolved_at",
    "resolved_by", "expires_at", "epoch",
)
STORED_FILE = ("id", "conversation_id", "message_id", "uploader", "agent", "name", "content_type", "size", "expires_at", "created_at")
TASK = (
    "id", "conversation_id", "agent", "title", "description", "status", "comments", "callback_url", "metadata",
    "error", "result", "result_at", "created_at", "updated_at",
)


class ExactEncoder(DjangoJSONEncoder):
    """DjangoJSONEncoder, but date-times keep their microseconds (as DRF writes them)."""

    def default(self, o: Any) -> Any:
        if isinstance(o, datetime):
            text = o.isoformat()
            return text[:-6] + "Z" if text.endswith("+00:00") else text
        return super().default(o)


def answer(body: Any) -> JsonResponse:
    return JsonResponse(body, encoder=ExactEncoder, safe=False, json_dumps_params={"ensure_ascii": False, "separators": (",", ":")})


def owner_of(request: HttpRequest) -> str:
    if not request.user.is_authenticated:
        raise Http404
    return str(request.user.pk)


def readable(request: HttpRequest, conversation_id: Any) -> Q:
    """The conversation, if the user may read it: theirs or shared, in tenant ""."""
    return Q(pk=conversation_id, tenant="") & (Q(owner=owner_of(request)) | Q(shared=True))


def number(request: HttpRequest, name: str, default: int) -> int:
    return int(request.GET.get(name, default))


def counted_page(rows: QuerySet[Any], request: HttpRequest) -> dict[str, Any]:
    limit, offset = number(request, "limit", 100), number(request, "offset", 0)
    total = rows.count()
    items = list(rows[offset : offset + limit])
    return {"items": items, "total": total, "limit": limit, "offset": offset, "has_more": offset + len(items) < total}


def message_page(request: HttpRequest, conversation_id: Any) -> dict[str, Any]:
    """A cursor page, uncounted: one statement with the access check and the cursor as subqueries."""
    limit = number(request, "limit", 100)
    rows = Message.objects.filter(Exists(Conversation.objects.filter(readable(request, conversation_id))), conversation_id=conversation_id)
    for name, lookup in (("before", "position__lt"), ("after", "position__gt")):
        if request.GET.get(name):
            cursor = Message.objects.filter(pk=request.GET[name], conversation_id=conversation_id).order_by().values("position")
            rows = rows.filter(**{lookup: Subquery(cursor)})
    ordering = "-position" if request.GET.get("order") == "desc" else "position"
    items = list(rows.order_by(ordering).values(*MESSAGE)[: limit + 1])
    return {"items": items[:limit], "total": None, "limit": limit, "offset": 0, "has_more": len(items) > limit}


def conversation_list(request: HttpRequest) -> JsonResponse:
    rows = Conversation.objects.filter(tenant="", owner=owner_of(request)).order_by("-created_at", "-id").values(*CONVERSATION)
    return answer(counted_page(rows, request))


def conversation_detail(request: HttpRequest, conversation_id: str) -> JsonResponse:
    conversation = Conversation.objects.filter(readable(request, conversation_id)).values(*CONVERSATION).first()
    if conversation is None:
        raise Http404
    return answer({**conversation, "messages": message_page(request, conversation_id)})


def message_list(request: HttpRequest, conversation_id: str) -> JsonResponse:
    return answer(message_page(request, conversation_id))


def event_list(request: HttpRequest, conversation_id: str) -> JsonResponse:
    if not Conversation.objects.filter(readable(request, conversation_id)).exists():
        raise Http404
    limit, after = number(request, "limit", 100), number(request, "after", 0)
    rows = list(Event.objects.filter(conversation_id=conversation_id, seq__gt=after).order_by("seq").values(*EVENT)[: limit + 1])
    events = rows[:limit]
    return answer({"events": events, "has_more": len(rows) > limit, "last_seq": events[-1]["seq"] if events else after})


def run_list(request: HttpRequest, conversation_id: str) -> JsonResponse:
    if not Conversation.objects.filter(readable(request, conversation_id)).exists():
        raise Http404
    rows = Run.objects.filter(conversation_id=conversation_id).order_by("-started_at", "-id").values(*RUN)
    return answer(counted_page(rows, request))


def interrupt_list(request: HttpRequest, conversation_id: str) -> JsonResponse:
    if not Conversation.objects.filter(readable(request, conversation_id)).exists():
        raise Http404
    rows = Interrupt.objects.filter(conversation_id=conversation_id, status="pending").order_by("requested_at", "id")
    return answer({"interrupts": list(rows.values(*INTERRUPT))})


def file_list(request: HttpRequest, conversation_id: str) -> JsonResponse:
    if not Conversation.objects.filter(readable(request, conversation_id)).exists():
        raise Http404
    rows = StoredFile.objects.filter(conversation_id=conversation_id).order_by("created_at", "id").values(*STORED_FILE)
    return answer(counted_page(rows, request))


def task_list(request: HttpRequest) -> JsonResponse:
    rows = Task.objects.filter(tenant="", owner=owner_of(request)).order_by("-created_at", "-id").values(*TASK)
    return answer(counted_page(rows, request))
