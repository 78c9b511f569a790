"""Views of conversations, their messages, their sharing and their event log.

Thin: each parses its input with a serializer or the query helpers below, calls
the conversation or event store with the request's scope, and serializes what
the store returns. Access rules (404 for what the caller may not see, 403 for
a reader of a shared conversation who writes) are the stores'.
"""

from __future__ import annotations

import re
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from ...exceptions import PreconditionFailed, Validation
from ...stores.conversations import thread_tag
from ...stores import conversation_store, event_store
from ..pagination import int_param, page_body, paging
from ..schema import extend_schema
from ..serializers.base import StrictSerializer, error_responses, representation
from ..serializers.conversations import (
    ConversationCreateInputSerializer,
    ConversationDetailSerializer,
    ConversationPageSerializer,
    ConversationSerializer,
    ConversationUpdateInputSerializer,
    EventListSerializer,
    EventSerializer,
    MessageCreateInputSerializer,
    MessagePageSerializer,
    MessageSerializer,
    MessageUpdateInputSerializer,
)
from .base import ScopedAPIView, resource_body

# -- input helpers (shared by the files and tasks views) ----------------------------------------


def validated(serializer_class: type[StrictSerializer], request: Request) -> dict[str, Any]:
    """The request body checked by ``serializer_class``: unknown fields 400 ``unknown_field``, bad values 400 ``invalid``."""
    serializer = serializer_class(data=request.data)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


def text_param(request: Request, name: str) -> str | None:
    value = request.query_params.get(name)
    return None if value is None or value == "" else value


def bool_param(request: Request, name: str) -> bool:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return False
    if raw.lower() in ("true", "1"):
        return True
    if raw.lower() in ("false", "0"):
        return False
    raise Validation(f"{name} must be true or false.", code="invalid_parameter", field=name)


def order_param(request: Request) -> str | None:
    """``order`` as given; the store refuses anything but asc / desc."""
    return text_param(request, "order")


LIMIT = OpenApiParameter("limit", int, description="Page size, 1 to MAX_PAGE_SIZE (default DEFAULT_PAGE_SIZE).")
OFFSET = OpenApiParameter("offset", int, description="How many items to skip, 0 or more.")
ORDER = OpenApiParameter("order", str, enum=["asc", "desc"], description="Sort direction.")
TOTAL = OpenApiParameter("total", bool, description="Count the listing into the page's total (default true).")
PAGING_PARAMETERS = [LIMIT, OFFSET, ORDER, TOTAL]
def keyset_paging_parameters(rows: str, row: str, moment: str) -> list[OpenApiParameter]:
    """``limit``, ``offset``, ``order``, ``total``, ``before`` and ``after`` of a listing with id cursors.

    The cursors are strict, on ``(moment, id)`` in ascending sense whatever the
    ``order`` shown; an id that names no row of the listing (or no UUID) is 404,
    as a message cursor is. A read from a cursor is not counted unless asked.
    """
    return [
        LIMIT,
        OFFSET,
        ORDER,
        OpenApiParameter(
            "total",
            bool,
            description=f"Count the {rows} the page is taken from into its total (default: true without a cursor, "
            "false with before or after).",
        ),
        OpenApiParameter(
            "before", str, description=f"A {row} id: only {rows} strictly before it ({moment}, then id)."
        ),
        OpenApiParameter("after", str, description=f"A {row} id: only {rows} strictly after it ({moment}, then id)."),
    ]


#: Message pages: a read from a cursor is not counted unless asked (the count grows with the transcript).
MESSAGE_PAGING_PARAMETERS = keyset_paging_parameters("messages", "message", "position")


# Every endpoint below can answer these (404 also for a bad or invisible id).
READ_ERRORS = (400, 401, 403, 404)
WRITE_ERRORS = (400, 401, 403, 404, 413, 415)


# -- conversations ----------------------------------------------------------------------------


conversation_body = resource_body("conversation", ConversationSerializer)
message_body = resource_body("message", MessageSerializer)
event_body = representation(EventSerializer)


def with_etag(response: Response, conversation: Any) -> Response:
    response["ETag"] = f'"{conversation.version}"'
    return response


IF_MATCH = re.compile(r'^\s*(?:W/)?"?(\d{1,19})"?\s*$')


def if_match_version(request: Request) -> int | None:
    """The version of an ``If-Match: "<version>"`` header; None when absent or ``*``."""
    raw = request.headers.get("If-Match")
    if raw is None or raw.strip() in ("", "*"):
        return None
    match = IF_MATCH.match(raw)
    if match is None:
        raise Validation('If-Match must be a version in quotes, like "3".', code="invalid", field="If-Match")
    return int(match.group(1))


class ConversationListView(ScopedAPIView):
    """The caller's own conversations; create one."""

    @extend_schema(
        operation_id="conversations_list",
        parameters=[
            *PAGING_PARAMETERS,
            OpenApiParameter("pinned_first", bool, description="Pinned conversations first."),
            OpenApiParameter("agent", str, description="Only this agent's conversations."),
            OpenApiParameter(
                "action_due_before",
                OpenApiTypes.DATETIME,
                description="Only conversations with action_due_at at or before this time, earliest first.",
            ),
        ],
        responses={200: ConversationPageSerializer, **error_responses(*READ_ERRORS)},
    )
    def get(self, request: Request) -> Response:
        page = conversation_store().list(
            self.scope,
            **paging(request),
            order=order_param(request),
            agent=text_param(request, "agent"),
            pinned_first=bool_param(request, "pinned_first"),
            action_due_before=text_param(request, "action_due_before"),
        )
        return Response(page_body(page, conversation_body))

    @extend_schema(
        operation_id="conversations_create",
        request=ConversationCreateInputSerializer,
        responses={201: ConversationSerializer, **error_responses(*WRITE_ERRORS, 409)},
    )
    def post(self, request: Request) -> Response:
        data = validated(ConversationCreateInputSerializer, request)
        conversation = conversation_store().create(self.scope, **data)
        return with_etag(Response(conversation_body(conversation), status=status.HTTP_201_CREATED), conversation)


class ConversationDetailView(ScopedAPIView):
    """One conversation with a page of its messages; update it; delete it."""

    @extend_schema(
        operation_id="conversations_retrieve",
        parameters=MESSAGE_PAGING_PARAMETERS,
        responses={200: ConversationDetailSerializer, **error_responses(*READ_ERRORS)},
    )
    def get(self, request: Request, conversation_id: str) -> Response:
        store = conversation_store()
        conversation = store.get(self.scope, conversation_id)
        messages = store.list_messages(
            self.scope,
            conversation.pk,
            **paging(request),
            order=order_param(request),
            before=text_param(request, "before"),
            after=text_param(request, "after"),
        )
        body = {**conversation_body(conversation), "messages": page_body(messages, message_body)}
        return with_etag(Response(body), conversation)

    @extend_schema(
        operation_id="conversations_partial_update",
        parameters=[
            OpenApiParameter(
                "If-Match",
                str,
                OpenApiParameter.HEADER,
                description='The version read, in quotes ("3"); the update is refused with 412 if it changed.',
            )
        ],
        request=ConversationUpdateInputSerializer,
        responses={200: ConversationSerializer, **error_responses(*WRITE_ERRORS, 412)},
    )
    def patch(self, request: Request, conversation_id: str) -> Response:
        version = if_match_version(request)
        changes = validated(ConversationUpdateInputSerializer, request)
        store = conversation_store()
        if version is None:
            conversation = store.update(self.scope, conversation_id, **changes)
        else:
            conversation = store.update_if(self.scope, conversation_id, version, **changes)
            if conversation is None:
                current = store.get(self.scope, conversation_id).version
                raise PreconditionFailed(
                    f"The conversation is at version {current}, not {version}.", current_version=current
                )
        return with_etag(Response(conversation_body(conversation)), conversation)

    @extend_schema(
        operation_id="conversations_destroy",
        request=None,
        responses={204: OpenApiResponse(description="Deleted."), **error_responses(401, 403, 404)},
    )
    def delete(self, request: Request, conversation_id: str) -> Response:
        conversation_store().delete(self.scope, conversation_id)
        return Response(status=status.HTTP_204_NO_CONTENT)


class ConversationShareView(ScopedAPIView):
    """Share a conversation with the caller's tenant (read only), or stop sharing it."""

    @extend_schema(
        operation_id="conversations_share",
        request=None,
        responses={200: ConversationSerializer, **error_responses(401, 403, 404)},
    )
    def post(self, request: Request, conversation_id: str) -> Response:
        conversation = conversation_store().share(self.scope, conversation_id, True)
        return with_etag(Response(conversation_body(conversation)), conversation)

    @extend_schema(
        operation_id="conversations_unshare",
        request=None,
        responses={200: ConversationSerializer, **error_responses(401, 403, 404)},
    )
    def delete(self, request: Request, conversation_id: str) -> Response:
        conversation = conversation_store().share(self.scope, conversation_id, False)
        return with_etag(Response(conversation_body(conversation)), conversation)


# -- messages ---------------------------------------------------------------------------------


class MessageListView(ScopedAPIView):
    """A conversation's messages, oldest first; append one."""

    @extend_schema(
        operation_id="messages_list",
        parameters=MESSAGE_PAGING_PARAMETERS,
        responses={200: MessagePageSerializer, **error_responses(*READ_ERRORS)},
    )
    def get(self, request: Request, conversation_id: str) -> Response:
        query = paging(request)
        before, after = text_param(request, "before"), text_param(request, "after")
        # An offset page carries the thread tag (ETag, for If-Match on a save); a cursor page stays one
        # statement and has none. The tag is read before the page, so it is never newer than what the
        # page shows: a save made with it fails whenever the thread moved after it was read.
        tag = None if before or after else thread_tag(conversation_store().get(self.scope, conversation_id))
        page = conversation_store().list_messages(
            self.scope, conversation_id, **query, order=order_param(request), before=before, after=after
        )
        response = Response(page_body(page, message_body))
        if tag is not None:
            response["ETag"] = tag
        return response

    @extend_schema(
        operation_id="messages_create",
        request=MessageCreateInputSerializer,
        responses={201: MessageSerializer, **error_responses(*WRITE_ERRORS, 409)},
    )
    def post(self, request: Request, conversation_id: str) -> Response:
        data = validated(MessageCreateInputSerializer, request)
        message = conversation_store().append_message(self.scope, conversation_id, **data)
        return Response(message_body(message), status=status.HTTP_201_CREATED)


class MessageDetailView(ScopedAPIView):
    """Change a message's content or metadata; delete it."""

    @extend_schema(
        operation_id="messages_partial_update",
        request=MessageUpdateInputSerializer,
        responses={200: MessageSerializer, **error_responses(*WRITE_ERRORS)},
    )
    def patch(self, request: Request, conversation_id: str, message_id: str) -> Response:
        changes = validated(MessageUpdateInputSerializer, request)
        message = conversation_store().update_message(self.scope, conversation_id, message_id, **changes)
        return Response(message_body(message))

    @extend_schema(
        operation_id="messages_destroy",
        request=None,
        responses={204: OpenApiResponse(description="Deleted."), **error_responses(401, 403, 404)},
    )
    def delete(self, request: Request, conversation_id: str, message_id: str) -> Response:
        conversation_store().delete_message(self.scope, conversation_id, message_id)
        return Response(status=status.HTTP_204_NO_CONTENT)


# -- events -----------------------------------------------------------------------------------


class EventListView(ScopedAPIView):
    """A conversation's event log, by sequence number cursors."""

    @extend_schema(
        operation_id="events_list",
        parameters=[
            OpenApiParameter("after", int, description="Only events with seq greater than this (default 0)."),
            OpenApiParameter("before", int, description="Only events with seq less than this."),
            OpenApiParameter("types", str, description="Comma-separated event types to keep."),
            LIMIT,
            ORDER,
        ],
        responses={200: EventListSerializer, **error_responses(*READ_ERRORS)},
    )
    def get(self, request: Request, conversation_id: str) -> Response:
        types = request.query_params.get("types")
        page = event_store().list(
            self.scope,
            conversation_id,
            after=int_param(request, "after", 0),
            before=int_param(request, "before", None),
            types=None if types is None else [name for name in types.split(",") if name],
            limit=int_param(request, "limit", None),
            order=order_param(request) or "asc",
        )
        return Response(
            {
                "events": [event_body(event) for event in page.events],
                "has_more": page.has_more,
                "last_seq": page.last_seq,
            }
        )


