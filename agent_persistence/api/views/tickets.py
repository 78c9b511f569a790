"""Views that issue websocket tickets (see :mod:`agent_persistence.realtime.tickets`).

The request is authenticated by the host's DRF authentication (session, Basic,
token...); the ticket then authenticates one socket, so clients that carry no
session cookie (scripts, mobile apps, servers) can open one.
"""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from ...conf import app_settings
from ...realtime.admission import conversation_to_open
from ...realtime.tickets import IssuedTicket, issue_ticket
from ..schema import extend_schema
from ..serializers.base import error_responses
from ..serializers.tickets import WebsocketTicketSerializer
from .base import ScopedAPIView
from .turns import EmptyBody, read_body

TAGS = ["websocket"]
DESCRIPTION = (
    "A short-lived (WS_TICKET_TTL seconds), single-use ticket for one websocket: open "
    "ws/conversations/<id>/?ticket=<ticket>. The socket acts for the caller's scope. A refused ticket "
    "(expired, spent, altered, bound to another conversation, or issued to a user deactivated since) closes the "
    "socket with 4403. Over WS_TICKETS_PER_MINUTE tickets in a minute: 429 too_many_tickets, with Retry-After."
)


def account_of(request: Request) -> str:
    """The primary key of the request's Django user ("" when it has none), for the ticket to check when spent."""
    user = getattr(request, "user", None)
    return str(user.pk) if user is not None and getattr(user, "is_authenticated", False) and user.pk is not None else ""


def ticket_body(issued: IssuedTicket) -> dict[str, object]:
    return {
        "ticket": issued.ticket,
        "expires_at": issued.expires_at,
        "expires_in": float(app_settings.WS_TICKET_TTL),
        "conversation_id": issued.conversation_id,
    }


class WebsocketTicketView(ScopedAPIView):
    """A ticket for a socket to any conversation the caller may read."""

    @extend_schema(
        tags=TAGS,
        operation_id="websocket_ticket_create",
        request=None,
        responses={201: WebsocketTicketSerializer, **error_responses(400, 401, 403, 415, 429)},
        description=DESCRIPTION,
    )
    def post(self, request: Request) -> Response:
        read_body(EmptyBody, request)
        issued = issue_ticket(self.scope, account=account_of(request))
        return Response(WebsocketTicketSerializer(ticket_body(issued)).data, status=status.HTTP_201_CREATED)


class ConversationWebsocketTicketView(ScopedAPIView):
    """A ticket for a socket to this conversation only."""

    @extend_schema(
        tags=TAGS,
        operation_id="conversation_websocket_ticket_create",
        parameters=[OpenApiParameter("conversation_id", OpenApiTypes.UUID, OpenApiParameter.PATH, description="The conversation's id.")],
        request=None,
        responses={201: WebsocketTicketSerializer, **error_responses(400, 401, 403, 404, 415, 429)},
        description=DESCRIPTION + " 404 when the conversation is one the caller may not read, or the id is no UUID. "
        "An id no conversation has yet gets a ticket: the socket's first start creates the conversation, the caller's.",
    )
    def post(self, request: Request, conversation_id: str) -> Response:
        read_body(EmptyBody, request)
        pk, _ = conversation_to_open(self.scope, conversation_id)
        issued = issue_ticket(self.scope, pk, account=account_of(request))
        return Response(WebsocketTicketSerializer(ticket_body(issued)).data, status=status.HTTP_201_CREATED)
