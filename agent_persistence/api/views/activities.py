"""Views of a conversation's activity rows and of reconstruct-for-reload.

Thin, like the others: the stores check access (404 for what the caller may
not see, 403 for a reader of a shared conversation who writes) and clean the
rows; these parse the request and serialize what comes back.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter
from rest_framework.request import Request
from rest_framework.response import Response

from ...stores import activity_store
from ...stores.reconstruct import Reconstruction, reconstruct
from ..pagination import int_param, page_body
from ..schema import extend_schema
from ..serializers.activities import (
    ActivityListSerializer,
    ActivitySaveInputSerializer,
    ActivitySerializer,
    ReconstructionSerializer,
    SubagentCardSerializer,
)
from ..serializers.base import error_responses
from ..serializers.turns import InterruptSerializer
from .base import ScopedAPIView
from .conversations import READ_ERRORS, WRITE_ERRORS, conversation_body, message_body, text_param, validated

CONVERSATION_ID = OpenApiParameter(
    "conversation_id", OpenApiTypes.UUID, OpenApiParameter.PATH, description="The conversation's id."
)
TAGS = ["activities"]


def activities_body(rows: list[Any]) -> dict[str, Any]:
    return {"activities": ActivitySerializer(rows, many=True).data}


class ActivityListView(ScopedAPIView):
    """A conversation's activity rows: read them, or replace the whole list."""

    @extend_schema(
        tags=TAGS,
        operation_id="activities_list",
        parameters=[CONVERSATION_ID, OpenApiParameter("message_id", str, description="Only the rows of this turn.")],
        responses={200: ActivityListSerializer, **error_responses(*READ_ERRORS)},
    )
    def get(self, request: Request, conversation_id: str) -> Response:
        rows = activity_store().list(self.scope, conversation_id, message_id=text_param(request, "message_id"))
        return Response(activities_body(rows))

    @extend_schema(
        tags=TAGS,
        operation_id="activities_save",
        parameters=[CONVERSATION_ID],
        request=ActivitySaveInputSerializer,
        responses={200: ActivityListSerializer, **error_responses(*WRITE_ERRORS)},
        description="A full overwrite: the stored list becomes exactly this one (a row whose id was stored keeps "
        "its created_at and gets the next revision). Of concurrent saves, the stored list is one of them, never a mix.",
    )
    def put(self, request: Request, conversation_id: str) -> Response:
        data = validated(ActivitySaveInputSerializer, request)
        rows = activity_store().save(self.scope, conversation_id, [dict(row) for row in data["activities"]])
        return Response(activities_body(rows))


def reconstruction_body(rebuilt: Reconstruction) -> dict[str, Any]:
    turn = rebuilt.live_turn
    live_turn = None
    if turn is not None:
        record = turn.record
        live_turn = {
            "state": turn.state,
            "message_id": str(turn.message_id),
            "run_id": str(turn.run_id) if turn.run_id else None,
            "epoch": turn.epoch,
            "heartbeat_age": turn.heartbeat_age,
            "recording": {"index": record["index"], "message": record["message"]} if record else None,
        }
    return {
        "conversation": conversation_body(rebuilt.conversation),
        "messages": page_body(rebuilt.messages, message_body),
        "activities": ActivitySerializer(rebuilt.activities, many=True).data,
        "subagents": SubagentCardSerializer(rebuilt.subagents, many=True).data,
        "interrupts": InterruptSerializer(rebuilt.interrupts, many=True).data,
        "live_turn": live_turn,
    }


class ReconstructView(ScopedAPIView):
    """Everything a client needs to repaint a conversation after a reload, in one request."""

    @extend_schema(
        tags=TAGS,
        operation_id="conversations_reconstruct",
        parameters=[
            CONVERSATION_ID,
            OpenApiParameter("limit", OpenApiTypes.INT, description="Messages in the page, 1..MAX_PAGE_SIZE (default DEFAULT_PAGE_SIZE)."),
            OpenApiParameter("before", str, description="A message id: the page of messages just older than it."),
        ],
        responses={200: ReconstructionSerializer, **error_responses(*READ_ERRORS)},
    )
    def get(self, request: Request, conversation_id: str) -> Response:
        rebuilt = reconstruct(
            self.scope, conversation_id, limit=int_param(request, "limit", None), before=text_param(request, "before")
        )
        return Response(reconstruction_body(rebuilt))
