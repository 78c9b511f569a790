"""The AI SDK endpoints: a conversation's turn as the Vercel AI SDK's UI message stream (``useChat``).

``POST aisdk/chat`` takes ``DefaultChatTransport``'s body: a last message of the user's starts
a turn with it (creating the conversation, the caller's, when the chat's ``id`` is new); a last
message of the assistant's carries the answers to the turn's pending interrupts (approval
responses, client tool outputs), which continue it. Either way the answer streams back.
``GET aisdk/chat/<id>/stream`` is ``useChat({ resume: true })``'s reconnect: the turn in flight
replayed from its beginning on any replica (taking over a turn whose producer died), 204 when
none is. Paths follow the SDK's convention (``api`` + ``/<id>/stream``), so a client sets only
``api``. Access is the other turn endpoints': what the user may not read is 404.
The stream itself is :mod:`agent_persistence.aisdk.streams`; see ``docs/reference/aisdk.md``.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.core.handlers.asgi import ASGIRequest
from django.http import HttpResponse, StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request

from ...aisdk.chunks import Held
from ...aisdk.requests import ChatRequest, chat_request, held_of, user_message_id
from ...aisdk.streams import CONTENT_TYPE, HEADERS, chunk_stream
from ...conf import app_settings
from ...exceptions import Conflict, NotFound, TooManyRequests
from ...realtime.sse import admit_stream, blocking_event_stream, release_stream, release_with
from ...runtime import loop
from ...runtime.lifecycle import continue_turn, start_turn
from ...stores import conversation_store, turn_store
from ...stores.protocols import TurnView
from ..schema import extend_schema
from ..serializers.base import error_responses
from .agui import release_connections
from .base import ScopedAPIView
from .turns import non_atomic

TAGS = ["aisdk"]
CHAT_ID = OpenApiParameter("conversation_id", OpenApiTypes.UUID, OpenApiParameter.PATH, description="The chat's id: the conversation's.")
UI_CHUNK_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"data": {"type": "string", "description": "One UI message chunk as JSON (`{\"type\": \"text-delta\", ...}`), or [DONE]."}},
    "required": ["data"],
}
STREAM_RESPONSE = {
    (200, CONTENT_TYPE): OpenApiResponse(
        UI_CHUNK_SCHEMA, description="The AI SDK's UI message stream (header x-vercel-ai-ui-message-stream: v1), until the message ends.",
    )
}
UI_MESSAGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "A UI message. Of the last one: a user message's text parts are the question; an assistant message's "
    "tool parts carry approvals (state approval-responded, approval {id, approved, reason}) and client tool outputs.",
    "properties": {
        "id": {"type": "string"},
        "role": {"enum": ["user", "assistant"]},
        "parts": {"type": "array", "minItems": 1, "items": {
            "type": "object", "properties": {"type": {"type": "string"}, "text": {"type": "string"}}, "required": ["type"],
        }},
    },
    "required": ["id", "role", "parts"],
}
CHAT_BODY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "DefaultChatTransport's body (useChat).",
    "properties": {
        "id": {"type": "string", "format": "uuid", "description": "The chat's id: the conversation (created, the caller's, when new)."},
        "messages": {"type": "array", "minItems": 1, "items": UI_MESSAGE_SCHEMA, "description": "The chat's UI messages; only the last is read."},
        "trigger": {"enum": sorted(["submit-message", "regenerate-message"])},
        "messageId": {"type": "string"},
        "agent": {"type": "string", "description": "The agent of a new conversation's first turn (transport body option)."},
    },
    "required": ["id", "messages"],
}
ERRORS = (400, 401, 403, 404, 409, 410, 429)


def answers_of(request: ChatRequest, turn: TurnView) -> list[dict[str, Any]]:
    """The answers the assistant message carries to the turn's pending interrupts, as the interrupts endpoint takes them.

    An approval answers the interrupt it names (``approvalId`` is the interrupt's id) with
    ``{"approved": bool, "reason"?}``; a client tool output answers the ``client_tool``
    interrupt of its call with the output. Parts for interrupts no longer pending (a retried
    request) are left out.
    """
    pending = {str(interrupt["id"]): interrupt for interrupt in turn.interrupts}
    answers = []
    for approval in request.approvals:
        if approval["id"] in pending:
            answers.append({"id": approval["id"], "response": {key: value for key, value in approval.items() if key != "id"}})
    for interrupt_id, interrupt in pending.items():
        payload = interrupt.get("payload") or {}
        call_id = payload.get("tool_call_id") if isinstance(payload, dict) else None
        if interrupt.get("kind") == "client_tool" and call_id in request.outputs:
            answers.append({"id": interrupt_id, "response": request.outputs[call_id]})
    return answers


def text_length(turn: TurnView) -> int:
    message = (turn.final or {}).get("message") or (turn.record or {}).get("message") or {}
    content = message.get("content")
    return len(content) if isinstance(content, str) else 0


def ask(scope: Any, request: ChatRequest) -> None:
    """Start a turn with the question unless the conversation holds it already (a retried request).

    The start is ``POST turns/``'s (the turn store's ``begin``, one transaction): on an id no
    conversation has, it creates the conversation, the caller's; a refusal writes nothing.
    ``regenerate-message`` of a question the conversation holds is 409 ``regenerate_unsupported``:
    the transcript keeps every answer, so the question is asked again as a new message.
    """
    assert request.question is not None
    message_id = user_message_id(request.conversation_id, request.question["id"])
    try:
        conversation_store().get_message(scope, request.conversation_id, message_id)
    except NotFound:
        loop.run(start_turn(scope, request.conversation_id, content=request.question["content"], agent=request.agent,
                            user_message_id=message_id))
        return
    if request.trigger == "regenerate-message":
        raise Conflict("The conversation keeps every answer: send the question again as a new message.",
                       code="regenerate_unsupported")


@non_atomic
class AiSdkView(ScopedAPIView):
    """The base of both endpoints: JSON errors whatever the client accepts, the stream's response."""

    renderer_classes = [JSONRenderer]

    def perform_content_negotiation(self, request: Request, force: bool = False) -> Any:
        return super().perform_content_negotiation(request, force=True)

    def respond(self, request: Request, conversation_id: uuid.UUID, held: Held | None, admitted: Any) -> StreamingHttpResponse:
        release_connections()
        asgi = isinstance(request._request, ASGIRequest)
        chunks = chunk_stream(self.scope, conversation_id, held=held, use_relay=asgi)
        response = StreamingHttpResponse(chunks if asgi else blocking_event_stream(chunks), content_type=CONTENT_TYPE)
        release_with(response, admitted)  # counted until the server closes the response
        for name, value in HEADERS.items():
            response[name] = value
        return response

    def admit(self) -> Any:
        # The cap before any query: a user over it costs the server nothing more.
        admitted = admit_stream(self.scope)
        if admitted is None:
            raise TooManyRequests(
                f"This user already holds {app_settings.SSE_MAX_PER_USER} open streams on this server; close one first.",
                code="too_many_streams",
            )
        return admitted


class AiSdkChatView(AiSdkView):
    """``POST aisdk/chat``: useChat's request; the answer as a UI message stream."""

    @extend_schema(
        tags=TAGS, operation_id="aisdk_chat", request={"application/json": CHAT_BODY_SCHEMA},
        responses={**STREAM_RESPONSE, **error_responses(*ERRORS, 413, 415)},
        description=(
            "useChat's request (DefaultChatTransport). A last message of the user's (its text parts) starts a turn on the "
            "conversation `id`, as POST turns/ does (409 conversation_busy, interrupts_pending, message_exists, 403, 404, "
            "400: nothing is written), creating it, the caller's, when the id is new; the same message again (by id) streams "
            "the turn it started. A last message of the assistant's answers the turn's pending interrupts from its tool parts "
            "(approval-responded: the approval's id is the interrupt's; output-available: a client tool's result), as POST "
            "interrupts/ does (all of them, the owner only), and streams the continued turn from what the message holds. "
            "regenerate-message of a question the conversation holds is 409 regenerate_unsupported."
        ),
        examples=[OpenApiExample("useChat", request_only=True, value={
            "id": "0b6f8a52-3c1e-4f7a-9d2b-5e8c1a4f6b3d", "trigger": "submit-message",
            "messages": [{"id": "m1", "role": "user", "parts": [{"type": "text", "text": "Hello"}]}],
        })],
    )
    def post(self, request: Request) -> StreamingHttpResponse:
        admitted = self.admit()
        try:
            chat = chat_request(request.data)
            held = None
            if chat.question is not None:
                ask(self.scope, chat)
            turn = turn_store().read_turn(self.scope, chat.conversation_id)
            if turn.message_id is None:
                raise Conflict("The conversation has no turn yet: send a question first.", code="no_turn")
            if chat.assistant is not None:
                answers = answers_of(chat, turn)
                if answers:
                    loop.run(continue_turn(self.scope, chat.conversation_id, answers))
                held = held_of(chat.assistant, turn.message_id, text_length(turn))
            return self.respond(request, chat.conversation_id, held, admitted)
        except BaseException:
            release_stream(admitted)
            raise


class AiSdkChatStreamView(AiSdkView):
    """``GET aisdk/chat/<id>/stream``: the turn in flight, replayed from its beginning; 204 when none is."""

    @extend_schema(
        tags=TAGS, operation_id="aisdk_chat_stream", parameters=[CHAT_ID],
        responses={**STREAM_RESPONSE, 204: OpenApiResponse(description="No turn in flight (none yet, or it ended)."),
                   **error_responses(401, 403, 404, 429)},
        description=(
            "useChat({ resume: true })'s reconnect: the conversation's turn in flight (alive, dead, or parked on interrupts) "
            "as one UI message replayed from its beginning, then live, on any server. A turn whose producer died is taken "
            "over by the stream in this process when the caller owns the conversation. 204 when no turn is in flight."
        ),
    )
    def get(self, request: Request, conversation_id: str) -> HttpResponse:
        try:
            pk = uuid.UUID(conversation_id)
        except ValueError:
            raise NotFound() from None
        turn = turn_store().read_turn(self.scope, pk)  # 404 for what the user may not read
        if turn.message_id is None or turn.state not in ("queued", "alive", "dead", "interrupted"):  # queued: a worker takes it
            return HttpResponse(status=204)
        admitted = self.admit()
        try:
            return self.respond(request, pk, None, admitted)
        except BaseException:
            release_stream(admitted)
            raise
