"""The AG-UI endpoint: a conversation's turn as AG-UI events over server-sent events.

``GET`` (an ``EventSource``) or ``POST`` with a ``RunAgentInput`` (``@ag-ui/client``'s
``HttpAgent``, CopilotKit) stream the conversation's current turn as one AG-UI
run, from its start or from the position a ``Last-Event-ID`` names, on any
replica. A ``POST`` whose last message is a user message the conversation does
not hold yet starts a turn with it first (:func:`ask`), creating the
conversation, the caller's, when its id is new. Access is the other turn
endpoints': what the user may not read is 404.
The stream itself is :mod:`agent_persistence.agui.streams`; see
``docs/reference/agui.md``.
"""

from __future__ import annotations

import hashlib
import uuid
from typing import Any

import pydantic
from ag_ui.core import ResumeEntry, RunAgentInput, UserMessage
from django.core.handlers.asgi import ASGIRequest
from django.db import connections
from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request

from ...agui.positions import HEADER, Position, check_position, parse_position
from ...agui.streams import CONTENT_TYPE, event_stream
from ...conf import app_settings
from ...exceptions import Conflict, NotFound, TooManyRequests, Validation
from ...realtime.sse import admit_stream, blocking_event_stream, release_stream, release_with
from ...runtime import loop
from ...runtime.lifecycle import continue_turn, start_turn
from ...stores import conversation_store, metadata_store, turn_store
from ...stores.protocols import TurnView
from ..schema import extend_schema
from ..serializers.base import error_responses
from .base import ScopedAPIView
from .turns import CONVERSATION_ID, non_atomic

TAGS = ["agui"]
LAST_EVENT_ID = OpenApiParameter(
    HEADER, OpenApiTypes.STR, OpenApiParameter.HEADER,
    description="Resume after this event (the `id:` of the last event received): `<message_id>:<index>:<offset>:<results>:<args>`.",
)
#: One server-sent event of the stream (OpenAPI's itemSchema convention: the SSE fields of each event).
AG_UI_EVENT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "description": "The position: <message_id>:<index>:<offset>:<results>:<args>."},
        "event": {"type": "string"},
        "data": {"type": "string", "description": "One AG-UI event (protocol 1.0) as JSON, as the ag-ui-protocol models serialize it."},
    },
    "required": ["data"],
}
STREAM_RESPONSE = {
    (200, CONTENT_TYPE): OpenApiResponse(
        AG_UI_EVENT_SCHEMA,
        description="AG-UI events as server-sent events (`id:` the position, `data:` the event's JSON), until the run ends.",
    )
}
_OBJECT: dict[str, Any] = {"type": "object"}
RUN_AGENT_INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "AG-UI's RunAgentInput (camelCase, as AG-UI clients send it); validated by the ag-ui-protocol models.",
    "properties": {
        "threadId": {"type": "string"},
        "runId": {"type": "string", "description": "Echoed as the runId of RUN_STARTED and RUN_FINISHED."},
        "parentRunId": {"type": "string"},
        "protocolVersion": {"type": "string"},
        "state": {"type": "object", "description": "Not acted on (AG-UI allows any JSON)."},
        "messages": {"type": "array", "items": _OBJECT},
        "tools": {"type": "array", "items": _OBJECT},
        "context": {"type": "array", "items": _OBJECT},
        "forwardedProps": {"type": "object", "description": "Not acted on (AG-UI allows any JSON)."},
        "resume": {"type": "array", "items": _OBJECT},
    },
    "required": ["threadId", "runId", "messages"],
}
ERRORS = (400, 401, 403, 404, 409, 410, 429)
DESCRIPTION = (
    "Streams the conversation's current turn as one AG-UI run: RUN_STARTED, STATE_SNAPSHOT of the turn's status, "
    "TEXT_MESSAGE_START/CONTENT/END, TOOL_CALL_START/ARGS/END/RESULT, ACTIVITY_SNAPSHOT of pending interrupts, and "
    "RUN_FINISHED (outcome success, cancelled or interrupt) or RUN_ERROR. A Last-Event-ID resumes exactly after that "
    "event, on any server: 400 invalid_last_event_id when it is not an event id of this turn or is past what the turn "
    "holds, 410 turn_superseded when another turn holds the conversation. 409 no_turn when it has never had a turn. "
    "429 too_many_streams when the user already holds SSE_MAX_PER_USER open streams on this server process."
)


def run_agent_input(data: Any) -> RunAgentInput:
    """The body as AG-UI's RunAgentInput; 400 ``invalid`` (with the first problem) otherwise."""
    if not isinstance(data, dict):
        raise Validation("The body is an AG-UI RunAgentInput object.", field="body")
    try:
        return RunAgentInput.model_validate(data)
    except pydantic.ValidationError as exc:
        problem = exc.errors()[0]
        where = ".".join(str(part) for part in problem["loc"]) or "body"
        raise Validation(f"Not an AG-UI RunAgentInput: {where}: {problem['msg']}.", field=where[:100]) from None


def answers_of(resume: list[ResumeEntry]) -> list[dict[str, Any]]:
    """AG-UI resume entries as the interrupts endpoint's answers: a cancelled one answers ``{"cancelled": true}``."""
    return [
        {"id": entry.interrupt_id, "response": entry.payload if entry.status == "resolved" else {"cancelled": True}}
        for entry in resume
    ]


def end_of(turn: TurnView) -> Position:
    """Where a client that saw the whole of the turn's last run stands (the run that answers resumes from there)."""
    message = (turn.record or {}).get("message") or {}
    content = message.get("content")
    return Position(
        turn.message_id, turn.record["index"] if turn.record else 0, len(content) if isinstance(content, str) else 0,
        len(message.get("tool_calls") or []),
    )


def release_connections() -> None:
    """Give this request's database connections back now, not when the stream ends.

    Django closes a request's connections when its response is closed, which for a stream is
    when the run ends: each open stream would hold a pooled connection (or a server
    connection) for its whole life, and a few streams exhaust the pool. The stream's own reads
    take a connection each and give it back (:mod:`agent_persistence.realtime.follower`).
    Persistent connections (``CONN_MAX_AGE``) and a transaction in progress are left alone.
    """
    for conn in connections.all(initialized_only=True):
        if not conn.in_atomic_block and not conn.settings_dict.get("CONN_MAX_AGE"):
            conn.close()


#: The namespace of the user message ids made from AG-UI message ids that are no UUIDs.
AG_UI_MESSAGE_IDS = uuid.UUID("5f0c3b9e-2d4a-5b7e-9c1d-8a6f4e2b0c13")


def question_of(body: RunAgentInput) -> UserMessage | None:
    """The user message a run asks: its last message, when that is a user message and no resume entries come."""
    if body.resume or not body.messages or not isinstance(body.messages[-1], UserMessage):
        return None
    return body.messages[-1]


def agent_of(body: RunAgentInput) -> str | None:
    """``forwardedProps.agent``: the agent of a new conversation's first turn (else the conversation's)."""
    props = body.forwarded_props
    agent = props.get("agent") if isinstance(props, dict) else None
    if agent is not None and not isinstance(agent, str):
        raise Validation("forwardedProps.agent must be a string.", field="forwardedProps.agent")
    return agent


def user_message_id(conversation_id: str, message_id: str) -> uuid.UUID:
    """Our id of an AG-UI user message: its own when it is a UUID, else one made from it (the same for a retry)."""
    try:
        return uuid.UUID(message_id)
    except ValueError:
        return uuid.uuid5(AG_UI_MESSAGE_IDS, f"{conversation_id}\n{message_id}")


def ask(scope: Any, conversation_id: str, question: UserMessage, agent: str | None) -> bool:
    """Start a turn with ``question`` unless the conversation holds it already (a retried run); whether one started.

    The start is ``POST turns/``'s (the turn store's ``begin``, one transaction): on an id no
    conversation has, it creates the conversation, the caller's; a refusal (409
    ``conversation_busy``, ``interrupts_pending``, ``message_exists``, 404, 403, 400) writes nothing.
    """
    message_id = user_message_id(conversation_id, question.id)
    try:
        conversation_store().get_message(scope, conversation_id, message_id)
        return False
    except NotFound:
        pass
    content: Any = question.content
    if not isinstance(content, str):
        content = [part.model_dump(mode="json", by_alias=True, exclude_none=True) for part in content]
    loop.run(start_turn(scope, conversation_id, content=content, agent=agent, user_message_id=message_id))
    return True


#: The metadata store's namespace of this endpoint's server-side state (never exposed).
NAMESPACE = "agent_persistence.agui"


def resume_key(conversation_id: Any, resume: list[ResumeEntry]) -> str:
    """The key of one batch of resume entries (its interrupts, in any order) of one conversation."""
    ids = sorted({str(entry.interrupt_id) for entry in resume})
    return f"resume:{conversation_id}:{hashlib.sha256(chr(10).join(ids).encode()).hexdigest()}"


def resume_position(scope: Any, key: str, turn: TurnView) -> tuple[Position, bool]:
    """Where the interrupted run that a batch answers ended, and whether it is to be remembered now.

    The first request of a batch finds the turn parked: the end of its recording is the
    position, kept (under ``key``) once the answers are committed, so the same request again
    (a client retrying after a lost response) streams from the same position, although the
    turn has gone on since. A batch with no kept position whose turn is not parked any more
    (answered some other way) streams from the turn's end.
    """
    kept = metadata_store().get(scope, NAMESPACE, key)
    if isinstance(kept, str):
        try:
            position = parse_position(kept)
        except Validation:
            position = None
        if position is not None and position.message_id == turn.message_id:
            return position, False
    return end_of(turn), turn.state == "interrupted"


@non_atomic
class AgUiStreamView(ScopedAPIView):
    """The conversation's turn as an AG-UI run over server-sent events, resumable with Last-Event-ID."""

    # Errors are JSON whatever the client accepts (AG-UI clients send Accept: text/event-stream).
    renderer_classes = [JSONRenderer]

    def perform_content_negotiation(self, request: Request, force: bool = False) -> Any:
        return super().perform_content_negotiation(request, force=True)

    @extend_schema(
        tags=TAGS, operation_id="agui_stream", parameters=[CONVERSATION_ID, LAST_EVENT_ID],
        responses={**STREAM_RESPONSE, **error_responses(*ERRORS)}, description=DESCRIPTION,
    )
    def get(self, request: Request, conversation_id: str) -> StreamingHttpResponse:
        return self.stream(request, conversation_id, run_id=None)

    @extend_schema(
        tags=TAGS, operation_id="agui_run", parameters=[CONVERSATION_ID, LAST_EVENT_ID],
        request={"application/json": RUN_AGENT_INPUT_SCHEMA},
        responses={**STREAM_RESPONSE, **error_responses(*ERRORS, 413, 415)},
        description=DESCRIPTION + " The body is AG-UI's RunAgentInput (what HttpAgent sends); its runId names the run. "
        "When its last message is a user message the conversation does not hold (by id), the run starts a turn with it "
        "first, as POST turns/ does (409 conversation_busy, interrupts_pending or message_exists, 403, 404, 400: nothing "
        "is written), and streams that turn; on an id no conversation has, the start creates the conversation, the "
        "caller's (forwardedProps.agent names its agent). "
        "With resume entries the run answers the turn's pending interrupts first (all of them, as POST interrupts/: "
        "the owner only, 403 conversation_not_owned for readers; a cancelled entry answers {\"cancelled\": true}) and "
        "streams the continued turn from where the interrupted run ended.",
        examples=[OpenApiExample("HttpAgent", value={"threadId": "9b1e...", "runId": "run-1", "messages": []}, request_only=True)],
    )
    def post(self, request: Request, conversation_id: str) -> StreamingHttpResponse:
        body = run_agent_input(request.data)
        return self.stream(request, conversation_id, run_id=body.run_id, resume=body.resume or [],
                           question=question_of(body), agent=agent_of(body))

    def stream(self, request: Request, conversation_id: str, *, run_id: str | None,
               resume: list[ResumeEntry] | None = None, question: UserMessage | None = None,
               agent: str | None = None) -> StreamingHttpResponse:
        # The cap before any query: a user over it costs the server nothing more.
        admitted = admit_stream(self.scope)
        if admitted is None:
            raise TooManyRequests(
                f"This user already holds {app_settings.SSE_MAX_PER_USER} open AG-UI streams on this server; close one first.",
                code="too_many_streams",
            )
        try:
            start = parse_position(request.headers.get(HEADER))
            if question is not None and ask(self.scope, conversation_id, question, agent):
                start = None  # the new turn streams from its beginning, whatever position the client held
            turn = turn_store().read_turn(self.scope, conversation_id)
            if turn.message_id is None:
                raise Conflict("The conversation has no turn yet: start one, then stream it.", code="no_turn")
            if start is not None:
                start = check_position(start, turn)
            if resume:
                key = resume_key(uuid.UUID(str(conversation_id)), resume)
                position, remember = resume_position(self.scope, key, turn)
                start = start or position
                loop.run(continue_turn(self.scope, conversation_id, answers_of(resume)))
                if remember:
                    metadata_store().set(self.scope, NAMESPACE, key, str(position))
            release_connections()
            asgi = isinstance(request._request, ASGIRequest)
            events = event_stream(self.scope, uuid.UUID(str(conversation_id)), start=start, run_id=run_id, use_relay=asgi)
            response = StreamingHttpResponse(events if asgi else blocking_event_stream(events), content_type=CONTENT_TYPE)
        except BaseException:
            release_stream(admitted)
            raise
        release_with(response, admitted)  # counted until the server closes the response
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"  # nginx: pass each event on at once
        return response
