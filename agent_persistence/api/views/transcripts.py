"""Saving a conversation's whole thread over HTTP: ``PUT`` overwrites its messages, ``PATCH`` merges into them by id.

Both are methods of the message list, ``conversations/<id>/messages/``:
:class:`MessageThreadView` is :class:`~.conversations.MessageListView` (``GET``
lists, ``POST`` appends one) with the two saves added.

- ``PUT``: the transcript becomes exactly the posted list
  (``ConversationStore.replace_messages``; TanStack AI's ``saveThread``).
- ``PATCH``: the posted list is merged by id with TanStack AI's rule (the last
  posted id already stored is a cutoff; the same id: the posted message wins;
  new ids and id-less messages are appended), then saved
  (``ConversationStore.merge_messages``; what ``withPersistence`` does with a
  chat request's messages).

A save carries at most ``MAX_PAGE_SIZE`` messages (more: 413 ``too_large``,
before anything is read or written). Both answer 200 with the saved
transcript as a page, chosen by the ``limit`` / ``offset`` / ``order`` query
parameters of a listing, which are checked before the save.
"""

from __future__ import annotations

import re
from typing import Any, Callable

from drf_spectacular.utils import OpenApiExample
from rest_framework.request import Request
from rest_framework.response import Response

from ...conf import app_settings
from ...exceptions import StorageLimit
from ...stores import conversation_store
from ...stores.base import Page, clean_order, clean_paging, clean_with_total
from ...stores.conversations import SavedThread
from ..pagination import page_body, paging
from ..schema import extend_schema
from ..serializers.base import error_responses
from ..serializers.conversations import MessagePageSerializer
from ..serializers.transcripts import TranscriptSaveInputSerializer
from .conversations import (
    PAGING_PARAMETERS,
    WRITE_ERRORS,
    MessageListView,
    if_match_version,
    message_body,
    order_param,
    validated,
)

SAVE_EXAMPLE = OpenApiExample(
    "A thread",
    value={
        "messages": [
            {"id": "0190f3c2-6f1e-7a4b-9c1d-2e3f4a5b6c7d", "role": "user", "content": "Book a table for two"},
            {"role": "assistant", "content": "Which evening?", "created_at": "2024-01-02T12:00:05Z"},
        ]
    },
    request_only=True,
)


def check_thread_length(data: Any) -> None:
    """Refuse a thread longer than ``MAX_PAGE_SIZE`` before its messages are read one by one."""
    messages = data.get("messages") if isinstance(data, dict) else None
    limit = app_settings.MAX_PAGE_SIZE
    if isinstance(messages, list) and len(messages) > limit:
        raise StorageLimit(f"A save carries at most {limit} messages.", field="messages", limit=limit)


THREAD_TAG = re.compile(r'^"\d{1,19}\.\d{1,19}\.-?\d{1,20}\.\d{1,19}"$')


def thread_if_match(request: Request) -> int | str | None:
    """The precondition of a thread save: ``If-Match`` with a thread tag (``ETag`` of the message list) or a version.

    ``"<version>"`` (the conversation's ``ETag``) compares the conversation's
    version; ``"<version>.<next_position>.<stamp>"`` (the message list's
    ``ETag``) compares the thread, which every append, seal and save changes.
    Absent or ``*``: no precondition. Anything else is 400 ``invalid``.
    """
    raw = request.headers.get("If-Match")
    if raw is None or raw.strip() in ("", "*"):
        return None
    value = raw.strip().removeprefix("W/")
    if THREAD_TAG.match(value):
        return value
    return if_match_version(request)


def page_of_transcript(transcript: list[Any], *, limit: int, offset: int, order: str) -> Page[Any]:
    ordered = transcript if order == "asc" else transcript[::-1]
    return Page(items=ordered[offset : offset + limit], total=len(transcript), limit=limit, offset=offset)


class MessageThreadView(MessageListView):
    """A conversation's messages: list them, append one, or save the whole thread (overwrite or merge by id)."""

    @extend_schema(
        operation_id="messages_replace",
        description=(
            "Replace the conversation's messages with exactly the posted list, in one transaction: stored messages "
            "left out are deleted, posted ids already stored replace those messages, the others are added. "
            "Positions become 0 .. n - 1 in list order."
        ),
        parameters=PAGING_PARAMETERS,
        request=TranscriptSaveInputSerializer,
        examples=[SAVE_EXAMPLE],
        responses={200: MessagePageSerializer, **error_responses(*WRITE_ERRORS, 409)},
    )
    def put(self, request: Request, conversation_id: str) -> Response:
        return self.save_thread(request, conversation_id, conversation_store().replace_messages)

    @extend_schema(
        operation_id="messages_merge",
        description=(
            "Merge the posted messages into the conversation's by id (TanStack AI's rule), in one transaction: the "
            "last posted id already stored is a cutoff and stored messages after it are deleted; no posted id "
            "stored keeps every stored message (a new turn); a posted id already stored replaces that message; "
            "new ids and messages without an id are appended. An empty list changes nothing."
        ),
        parameters=PAGING_PARAMETERS,
        request=TranscriptSaveInputSerializer,
        examples=[SAVE_EXAMPLE],
        responses={200: MessagePageSerializer, **error_responses(*WRITE_ERRORS, 409)},
    )
    def patch(self, request: Request, conversation_id: str) -> Response:
        return self.save_thread(request, conversation_id, conversation_store().merge_messages)

    def save_thread(self, request: Request, conversation_id: str, save: Callable[..., SavedThread]) -> Response:
        # Everything the answer needs is checked before the save, so a bad query writes nothing.
        query = paging(request)
        clean_with_total(query["with_total"])  # the saved transcript is in hand, so its page always has its total
        limit, offset = clean_paging(query["limit"], query["offset"])
        order = clean_order(order_param(request), "asc")
        if_match = thread_if_match(request)
        check_thread_length(request.data)
        data = validated(TranscriptSaveInputSerializer, request)
        messages = [dict(message) for message in data.pop("messages")]
        transcript = save(self.scope, conversation_id, messages, if_match=if_match, **data)
        page = page_of_transcript(transcript, limit=limit, offset=offset, order=order)
        response = Response(page_body(page, message_body))
        # The tag the save read under its own lock: it names exactly the transcript answered (a write
        # committed after the save makes it stale, so a save made with it is 412, never a silent undo).
        response["ETag"] = transcript.tag
        return response
