"""``POST ws-ticket/`` and ``POST conversations/<id>/ws-ticket/``: a ticket for one websocket.

Issued to whoever the API's authentication says (Basic and session here, the
DRF defaults of the test settings), bound to the caller's scope and, on the
conversation route, to a conversation the caller may read (404 otherwise).
Hostile bodies are refused with the app's error body and issue nothing.
"""

from __future__ import annotations

import base64
from datetime import timedelta
from typing import Any

import pytest
from django.urls import reverse
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from rest_framework.test import APIClient

from agent_persistence.models import WebsocketTicket
from agent_persistence.realtime.tickets import redeem_ticket
from agent_persistence.scope import Scope
from agent_persistence.stores import conversation_store
from agent_persistence.testing.family import frozen_clock

from .test_hostile_input import DEEP_100K, assert_error

pytestmark = pytest.mark.django_db


def ticket_url() -> str:
    return reverse("agent_persistence:ws-ticket")


def conversation_ticket_url(conversation_id: Any) -> str:
    return reverse("agent_persistence:conversation-ws-ticket", args=[str(conversation_id)])


@pytest.fixture
def conversation(alice_scope: Scope) -> Any:
    return conversation_store().create(alice_scope, agent="echo", title="Mine").pk


def basic(username: str, password: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Basic " + base64.b64encode(f"{username}:{password}".encode()).decode())
    return client


def test_basic_auth_gets_a_ticket_for_the_caller_s_scope(alice_user: Any, alice_scope: Scope, conversation: Any) -> None:
    response = basic("alice", "alice-password").post(ticket_url())
    assert response.status_code == 201, response.content
    body = response.json()
    assert set(body) == {"ticket", "expires_at", "expires_in", "conversation_id"}
    assert body["conversation_id"] is None and body["expires_in"] == 60.0
    row = WebsocketTicket.objects.get()
    assert parse_datetime(body["expires_at"]) == row.expires_at
    assert row.expires_at - row.created_at == timedelta(seconds=60)
    assert redeem_ticket(body["ticket"], conversation) == alice_scope


def test_a_session_gets_a_ticket_too(alice_user: Any, alice_scope: Scope, conversation: Any) -> None:
    client = APIClient()
    assert client.login(username="alice", password="alice-password")
    response = client.post(ticket_url())
    assert response.status_code == 201, response.content
    assert redeem_ticket(response.json()["ticket"], conversation) == alice_scope


def test_the_conversation_route_binds_the_ticket_to_it(alice_client: APIClient, alice_scope: Scope, conversation: Any) -> None:
    response = alice_client.post(conversation_ticket_url(conversation))
    assert response.status_code == 201, response.content
    assert response.json()["conversation_id"] == str(conversation)
    assert WebsocketTicket.objects.get().conversation_id == conversation


def test_a_conversation_the_caller_may_not_read_is_404_and_issues_nothing(bob_client: APIClient, conversation: Any) -> None:
    for target in (conversation, "not-a-uuid", "%00", "%ED%A0%80", "a" * 3000):
        assert_error(bob_client.post(conversation_ticket_url(target)), 404, "not_found")
    assert not WebsocketTicket.objects.exists()


def test_a_new_conversation_id_gets_a_ticket_bound_to_it_and_nothing_is_created(bob_client: APIClient, bob_scope: Scope) -> None:
    """Before: 404, so a ticket client could not open the socket whose start creates the conversation."""
    from agent_persistence.models import Conversation

    new_id = "00000000-0000-4000-8000-000000000001"
    response = bob_client.post(conversation_ticket_url(new_id))
    assert response.status_code == 201, response.content
    assert response.json()["conversation_id"] == new_id
    assert redeem_ticket(response.json()["ticket"], new_id) == bob_scope
    assert not Conversation.objects.exists()


def test_a_reader_of_a_shared_conversation_gets_one(bob_client: APIClient, alice_scope: Scope, conversation: Any) -> None:
    conversation_store().share(alice_scope, conversation)
    assert bob_client.post(conversation_ticket_url(conversation)).status_code == 201


def test_anonymous_and_wrong_passwords_get_nothing(anon_client: APIClient, alice_user: Any) -> None:
    assert anon_client.post(ticket_url()).status_code == 403
    assert basic("alice", "wrong").post(ticket_url()).status_code == 403  # session first: no challenge, so 403
    assert not WebsocketTicket.objects.exists()


@pytest.mark.parametrize(
    "body, content_type, status, code",
    [
        (b'{"conversation_id": "x"}', "application/json", 400, "unknown_field"),
        (b'{"\\ud800": 1}', "application/json", 400, "invalid"),
        (b'{"a\\u0000": 1}', "application/json", 400, "invalid"),
        (b"[" * 1000 + b"]" * 1000, "application/json", 400, "malformed_request"),
        (DEEP_100K, "application/json", 400, "malformed_request"),
        (b'{"n": 1e999999}', "application/json", 400, None),
        (b"{not json", "application/json", 400, "malformed_request"),
        (b"ticket=please", "application/x-www-form-urlencoded", 415, "unsupported_media_type"),
        (b"\xff\xfe", "text/plain", 415, "unsupported_media_type"),
    ],
    ids=["unknown-field", "surrogate", "nul", "deep-1k", "deep-100k", "huge-number", "malformed", "form", "text"],
)
def test_hostile_bodies_are_refused_and_issue_nothing(
    alice_client: APIClient, conversation: Any, body: bytes, content_type: str, status: int, code: str | None
) -> None:
    for path in (ticket_url(), conversation_ticket_url(conversation)):
        response = alice_client.generic("POST", path, body, content_type=content_type)
        assert response.status_code == status, response.content[:300]
        assert response["Content-Type"].startswith("application/json")
        if code:
            assert response.json()["code"] == code, response.json()
    assert not WebsocketTicket.objects.exists()


def test_an_empty_json_object_is_an_empty_body(alice_client: APIClient) -> None:
    assert alice_client.post(ticket_url(), {}, format="json").status_code == 201


def test_tickets_over_the_per_minute_cap_are_429_too_many_tickets_with_retry_after(
    alice_client: APIClient, bob_client: APIClient, conversation: Any, settings: Any
) -> None:
    """WS_TICKETS_PER_MINUTE counts both routes for one scope, across replicas (the tickets table), in a sliding minute."""
    settings.AGENT_PERSISTENCE = {**settings.AGENT_PERSISTENCE, "WS_TICKETS_PER_MINUTE": 3}
    start = timezone.now()
    with frozen_clock(start):
        assert alice_client.post(ticket_url()).status_code == 201
    with frozen_clock(start + timedelta(seconds=20)):
        assert alice_client.post(conversation_ticket_url(conversation)).status_code == 201
        assert alice_client.post(ticket_url()).status_code == 201
        refused = alice_client.post(ticket_url())
        assert_error(refused, 429, "too_many_tickets")
        assert refused["Retry-After"] == "40"
        assert_error(alice_client.post(conversation_ticket_url(conversation)), 429, "too_many_tickets")
        assert bob_client.post(ticket_url()).status_code == 201  # the cap is per user
    assert WebsocketTicket.objects.count() == 4
    with frozen_clock(start + timedelta(seconds=61)):  # the first ticket left the window: one more
        assert alice_client.post(ticket_url()).status_code == 201
        assert_error(alice_client.post(ticket_url()), 429, "too_many_tickets")
    settings.AGENT_PERSISTENCE = {**settings.AGENT_PERSISTENCE, "WS_TICKETS_PER_MINUTE": None}
    with frozen_clock(start + timedelta(seconds=62)):
        assert all(alice_client.post(ticket_url()).status_code == 201 for _ in range(5))


def test_a_ticket_remembers_the_django_user_it_was_issued_to(alice_user: Any, alice_client: APIClient) -> None:
    assert alice_client.post(ticket_url()).status_code == 201
    assert WebsocketTicket.objects.get().account == str(alice_user.pk)
