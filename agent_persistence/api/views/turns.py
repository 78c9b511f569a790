"""Views of turns (start, stream status, resume, cancel), runs and interrupts.

Turns are driven on the process's producer loop (:mod:`agent_persistence.runtime.loop`):
a view hands the runtime's coroutine to it and waits only for the claim, so the
producer keeps running after the response. Everything else is one store call.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter
from django.db import transaction
from django.utils.decorators import method_decorator
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from ...runtime import loop
from ...runtime.lifecycle import TurnHandle, cancel_turn, continue_turn, resume_turn, start_turn
from ...stores import interrupt_store, run_store, turn_store
from ..pagination import page_body, paging
from ..schema import extend_schema
from ..serializers.base import StrictSerializer, error_responses, representation
from ..serializers.turns import (
    INTERRUPT_STATUS_FILTERS,
    AnswerBatchSerializer,
    AnsweredSerializer,
    AnswerSerializer,
    CancelledSerializer,
    InterruptListSerializer,
    InterruptSerializer,
    ResumeTurnSerializer,
    RunDetailSerializer,
    RunPageSerializer,
    RunSerializer,
    StartTurnSerializer,
    StreamStatusSerializer,
    TurnStartedSerializer,
)
from .base import ScopedAPIView
from .conversations import keyset_paging_parameters, order_param, text_param

CONVERSATION_ID = OpenApiParameter(
    "conversation_id", OpenApiTypes.UUID, OpenApiParameter.PATH, description="The conversation's id."
)
RUN_ID = OpenApiParameter("run_id", OpenApiTypes.UUID, OpenApiParameter.PATH, description="The run's id.")
READ_ERRORS = (400, 401, 403, 404)
TAGS = ["turns"]


def read_body(serializer_class: type[StrictSerializer], request: Request) -> dict[str, Any]:
    """The validated body; an absent body is an empty object."""
    data = request.data if request.data is not None else {}
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


def optional_text(value: Any) -> str | None:
    return None if value is None else str(value)


def turn_body(handle: TurnHandle) -> dict[str, Any]:
    return {
        "conversation_id": str(handle.conversation_id),
        "message_id": str(handle.message_id),
        "run_id": str(handle.run_id),
        "epoch": handle.epoch,
    }


run_body = representation(RunSerializer)
interrupt_body = representation(InterruptSerializer)


#: Turn transitions run on the producer loop's own connection, so the request must not hold a transaction
#: around them (under ``ATOMIC_REQUESTS`` on SQLite it would hold the write lock they wait for).
non_atomic = method_decorator(transaction.non_atomic_requests, name="dispatch")


class EmptyBody(StrictSerializer):
    """A request without fields: anything sent is an unknown field."""


@non_atomic
class StartTurnView(ScopedAPIView):
    """Start a turn: the user's message is stored and a producer answers it on this server."""

    # DRF's ScopedRateThrottle limits this view at REST_FRAMEWORK['DEFAULT_THROTTLE_RATES'][throttle_scope].
    throttle_scope = "agent_persistence.turn_start"

    @extend_schema(
        tags=TAGS,
        operation_id="turns_start",
        parameters=[CONVERSATION_ID],
        request=StartTurnSerializer,
        responses={
            202: TurnStartedSerializer,
            **error_responses(400, 401, 403, 404, 409, 413, 415),
        },
        description=(
            "Stores the user message (creating the conversation, owned by the caller, when the id is new: the id is "
            "chosen by the client, and a malformed one is 400 invalid_id), claims the conversation and starts the "
            "producer. 409 conversation_busy (details.occupant) while a live turn holds it; 409 interrupts_pending "
            "(details.pending) while interrupts wait; 400 unknown_agent."
        ),
        examples=[
            OpenApiExample("Start", value={"content": "What is the capital of France?", "agent": "assistant"}, request_only=True),
        ],
    )
    def post(self, request: Request, conversation_id: str) -> Response:
        body = read_body(StartTurnSerializer, request)
        handle = loop.run(
            start_turn(
                self.scope,
                conversation_id,
                content=body["content"],
                agent=body.get("agent"),
                message_id=body.get("message_id"),
                user_message_id=body.get("user_message_id"),
                metadata=body.get("metadata"),
            )
        )
        return Response(turn_body(handle), status=status.HTTP_202_ACCEPTED)


class StreamStatusView(ScopedAPIView):
    """Stream status discovery: which turn is in flight and whether its producer is alive, dead or done."""

    @extend_schema(
        tags=TAGS,
        operation_id="turns_stream_status",
        parameters=[CONVERSATION_ID],
        responses={200: StreamStatusSerializer, **error_responses(*READ_ERRORS)},
    )
    def get(self, request: Request, conversation_id: str) -> Response:
        turn = turn_store().read_turn(self.scope, conversation_id)
        recording = None
        if turn.record is not None:
            recording = {"index": turn.record["index"], "message": turn.record["message"]}
        return Response(
            {
                # A turn parked on interrupts is done as far as its producer goes.
                "state": "done" if turn.state == "interrupted" else turn.state,
                "message_id": optional_text(turn.message_id),
                "run_id": optional_text(turn.run_id),
                "epoch": turn.epoch,
                "replica": turn.replica,
                "heartbeat_age": turn.heartbeat_age,
                "recording": recording,
            }
        )


@non_atomic
class ResumeTurnView(ScopedAPIView):
    """Take over a dead producer's turn and drive it on from its last checkpoint, on this server."""

    @extend_schema(
        tags=TAGS,
        operation_id="turns_resume",
        parameters=[CONVERSATION_ID],
        request=ResumeTurnSerializer,
        responses={202: TurnStartedSerializer, **error_responses(400, 401, 403, 404, 409, 410, 415)},
        description="409 conversation_busy while the producer is alive; 410 turn_not_resumable when the turn finished, "
        "another turn holds the conversation, or there is none.",
    )
    def post(self, request: Request, conversation_id: str) -> Response:
        body = read_body(ResumeTurnSerializer, request)
        handle = loop.run(resume_turn(self.scope, conversation_id, message_id=body.get("message_id")))
        return Response(turn_body(handle), status=status.HTTP_202_ACCEPTED)


@non_atomic
class CancelTurnView(ScopedAPIView):
    """Stop the conversation's turn: it ends as cancelled and keeps its partial answer."""

    @extend_schema(
        tags=TAGS,
        operation_id="turns_cancel",
        parameters=[CONVERSATION_ID],
        request=None,
        responses={202: CancelledSerializer, **error_responses(400, 401, 403, 404, 409, 415)},
        description="409 no_turn_running when no run is running.",
    )
    def post(self, request: Request, conversation_id: str) -> Response:
        read_body(EmptyBody, request)
        run = loop.run(cancel_turn(self.scope, conversation_id))
        return Response({"run_id": str(run.pk)}, status=status.HTTP_202_ACCEPTED)


class ConversationRunsView(ScopedAPIView):
    """The conversation's runs, subagents included, newest first."""

    @extend_schema(
        tags=TAGS,
        operation_id="runs_list",
        parameters=[
            CONVERSATION_ID,
            *keyset_paging_parameters("runs", "run", "started_at"),
            OpenApiParameter("message_id", OpenApiTypes.UUID, description="Only this turn's runs."),
        ],
        responses={200: RunPageSerializer, **error_responses(*READ_ERRORS)},
    )
    def get(self, request: Request, conversation_id: str) -> Response:
        message_id = request.query_params.get("message_id") or None
        page = run_store().list(
            self.scope,
            conversation_id,
            message_id=message_id,
            **paging(request),
            order=order_param(request),
            before=text_param(request, "before"),
            after=text_param(request, "after"),
        )
        return Response(page_body(page, run_body))


class RunDetailView(ScopedAPIView):
    """One run and its direct child runs."""

    @extend_schema(
        tags=TAGS,
        operation_id="runs_retrieve",
        parameters=[RUN_ID],
        responses={200: RunDetailSerializer, **error_responses(401, 403, 404)},
    )
    def get(self, request: Request, run_id: str) -> Response:
        run = run_store().get(self.scope, run_id)
        children = run_store().children(self.scope, run.pk)
        return Response(RunDetailSerializer(run, context={"children": children}).data)


@non_atomic
class InterruptsView(ScopedAPIView):
    """The conversation's interrupts; answering a batch of them."""

    @extend_schema(
        tags=TAGS,
        operation_id="interrupts_list",
        parameters=[
            CONVERSATION_ID,
            OpenApiParameter(
                "status", OpenApiTypes.STR, enum=INTERRUPT_STATUS_FILTERS, description="Default pending; all for every one."
            ),
        ],
        responses={200: InterruptListSerializer, **error_responses(*READ_ERRORS)},
    )
    def get(self, request: Request, conversation_id: str) -> Response:
        wanted = request.query_params.get("status") or "pending"
        interrupts = interrupt_store().list(self.scope, conversation_id, status=None if wanted == "all" else wanted)
        return Response({"interrupts": [interrupt_body(interrupt) for interrupt in interrupts]})

    @extend_schema(
        tags=TAGS,
        operation_id="interrupts_answer",
        parameters=[CONVERSATION_ID],
        request=AnswerBatchSerializer,
        responses={200: AnsweredSerializer, **error_responses(400, 401, 403, 404, 409, 410, 413, 415)},
        description=(
            "Settles every pending interrupt at once, all or nothing: each entry resolves one (a response) or cancels "
            'it ("status": "cancelled"), and the turn is driven on when that releases it. 410 interrupt_expired; '
            "400 unanswered_interrupts / duplicate_answer; 404 interrupt_not_found; 409 already_answered / "
            "interrupt_cancelled."
        ),
        examples=[
            OpenApiExample(
                "Approve",
                value={"answers": [{"id": "0192f5e4-6a7b-7c3d-8e9f-0a1b2c3d4e5f", "response": {"approved": True}}]},
                request_only=True,
            ),
            OpenApiExample(
                "Approve one, cancel another",
                value={
                    "answers": [
                        {"id": "0192f5e4-6a7b-7c3d-8e9f-0a1b2c3d4e5f", "response": {"approved": True}},
                        {"id": "0192f5e4-6a7b-7c3d-8e9f-0a1b2c3d4e60", "status": "cancelled"},
                    ]
                },
                request_only=True,
            ),
        ],
    )
    def post(self, request: Request, conversation_id: str) -> Response:
        body = read_body(AnswerBatchSerializer, request)
        answers = [AnswerSerializer().to_entry(answer) for answer in body["answers"]]
        resolved, handle = loop.run(continue_turn(self.scope, conversation_id, answers))
        return Response(
            {
                "interrupts": [interrupt_body(interrupt) for interrupt in resolved],
                "continued": turn_body(handle) if handle is not None else None,
                "took_over": handle is not None and handle.took_over,
            }
        )
