"""Views of the run lifecycle: a run's subagent runs, the interrupts one run asked, cancelling one interrupt.

Reads follow the conversation's read rule; cancelling is the owner's.
Cancelling one interrupt settles that question; when it was the last pending
one of its conversation (the others answered by a partial batch, or
cancelled), the turn that asked goes on, as after a batch
(``POST conversations/<id>/interrupts/``) that settles the rest: the cancel
is that batch's one entry (``{"id", "status": "cancelled"}``), committed with
the turn's continuation in one transaction. A repeat cancel moves nothing and
continues nothing (a dead turn stays the reaper's).
"""

from __future__ import annotations

from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter
from rest_framework.request import Request
from rest_framework.response import Response

from ...models import InterruptStatus
from ...runtime import loop
from ...runtime.lifecycle import begin_continuation, continue_turn, launch
from ...stores import interrupt_store, run_store
from ...stores.interrupts import is_lapsed
from ...stores.protocols import Continuation
from ..schema import extend_schema
from ..serializers.base import error_responses
from ..serializers.runs import RunListSerializer
from ..serializers.turns import INTERRUPT_STATUS_FILTERS, InterruptListSerializer, InterruptSerializer, RunSerializer
from .base import ScopedAPIView
from .turns import RUN_ID, EmptyBody, non_atomic, read_body

INTERRUPT_ID = OpenApiParameter(
    "interrupt_id", OpenApiTypes.UUID, OpenApiParameter.PATH, description="The interrupt's id."
)
TAGS = ["turns"]


class RunChildrenView(ScopedAPIView):
    """The run's child runs: the subagents it started, oldest first."""

    @extend_schema(
        tags=TAGS,
        operation_id="runs_children",
        parameters=[RUN_ID],
        responses={200: RunListSerializer, **error_responses(401, 403, 404)},
        description="The direct children (parent = this run), ordered by started_at then id. 404 run_not_found.",
    )
    def get(self, request: Request, run_id: str) -> Response:
        children = run_store().children(self.scope, run_id)
        return Response({"runs": RunSerializer(children, many=True).data})


class RunInterruptsView(ScopedAPIView):
    """The interrupts one run asked (a subagent's child run included), pending ones by default."""

    @extend_schema(
        tags=TAGS,
        operation_id="runs_interrupts",
        parameters=[
            RUN_ID,
            OpenApiParameter(
                "status", OpenApiTypes.STR, enum=INTERRUPT_STATUS_FILTERS, description="Default pending; all for every one."
            ),
        ],
        responses={200: InterruptListSerializer, **error_responses(400, 401, 403, 404)},
        description="Ordered by requested_at then id. 404 run_not_found; 400 invalid for an unknown status.",
    )
    def get(self, request: Request, run_id: str) -> Response:
        wanted = request.query_params.get("status") or "pending"
        interrupts = interrupt_store().list(self.scope, run_id=run_id, status=None if wanted == "all" else wanted)
        return Response({"interrupts": InterruptSerializer(interrupts, many=True).data})


@non_atomic
class CancelInterruptView(ScopedAPIView):
    """Cancel one pending interrupt; cancelling it again returns it as it is. The last one continues the turn."""

    @extend_schema(
        tags=TAGS,
        operation_id="interrupts_cancel",
        parameters=[INTERRUPT_ID],
        request=None,
        responses={200: InterruptSerializer, **error_responses(400, 401, 403, 404, 409, 415)},
        description=(
            "The interrupt becomes cancelled (resolved_at now, response null). 409 already_answered when it was "
            "resolved; 404 interrupt_not_found; 403 conversation_not_owned for a reader of a shared conversation. "
            "When it was the last pending interrupt of its conversation, the turn that asked goes on (as after a "
            "batch that settles the rest); otherwise the turn stays parked until the others are settled."
        ),
    )
    def post(self, request: Request, interrupt_id: str) -> Response:
        read_body(EmptyBody, request)
        interrupt = interrupt_store().get(self.scope, interrupt_id)
        if interrupt.status != InterruptStatus.PENDING:
            # Already settled: a repeat cancel returns it as it is (409 when it was answered) and continues nothing.
            return Response(InterruptSerializer(interrupt_store().cancel(self.scope, interrupt.pk)).data)
        if is_lapsed(interrupt, timezone.now()):
            # A batch refuses a lapsed question (410); cancelling one stays legal. Only the call that moved it
            # continues the turn.
            interrupt = interrupt_store().cancel(self.scope, interrupt.pk)
            if not interrupt_store().has_pending(interrupt.conversation_id):
                loop.run(continue_turn(self.scope, interrupt.conversation_id, []))
            return Response(InterruptSerializer(interrupt).data)
        # A one-entry batch: the cancel and, when it settles the last question, the turn's continuation commit in
        # one transaction under the turn's lock. A concurrent cancel that got there first makes this entry a
        # repeat, which writes nothing and finds the turn already continued.
        # Committed here, on the request's connection, as the store's cancel was; only a claimed turn goes to the loop.
        continuation = begin_continuation(
            self.scope, interrupt.conversation_id, [{"id": str(interrupt.pk), "status": "cancelled"}]
        )
        if continuation.plan is not None:
            loop.run(drive(continuation))
        return Response(InterruptSerializer(continuation.interrupts[0]).data)


async def drive(continuation: Continuation) -> None:
    """Start the producer of a continued (or taken over) turn on the producer loop."""
    assert continuation.plan is not None
    launch(continuation.plan, took_over=continuation.took_over)
