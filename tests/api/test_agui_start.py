"""A RunAgentInput whose last message is a new user message starts a turn, creating the conversation when its id is new.

As ``HttpAgent`` does: add the user message, ``runAgent()``. Before, the
endpoint never started a turn: a new thread id was 404 and a new message on a
known thread streamed the previous turn again.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from ag_ui.core import EventType
from rest_framework.test import APIClient

from agent_persistence.models import Conversation, Message, Run
from agent_persistence.scope import Scope
from agent_persistence.stores import conversation_store
from tests.agents import ANSWER

from .test_agui import agui_url, check_sequence, drained, fast_turns, read_stream, text_of  # noqa: F401 - fixtures

pytestmark = pytest.mark.django_db(transaction=True)


def run_input(conversation_id: Any, *messages: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"threadId": str(conversation_id), "runId": "run-1", "messages": list(messages), "state": {}, "tools": [],
            "context": [], "forwardedProps": extra.pop("forwarded_props", {}), **extra}


def user(text: Any, message_id: str | None = None) -> dict[str, Any]:
    return {"id": message_id or str(uuid.uuid4()), "role": "user", "content": text}


def counts() -> tuple[int, int, int]:
    return Conversation.objects.count(), Run.objects.count(), Message.objects.count()


def post(client: APIClient, conversation_id: Any, body: Any, **headers: Any) -> Any:
    return client.post(agui_url(conversation_id), body, format="json", HTTP_ACCEPT="text/event-stream", **headers)


def test_a_run_on_a_new_thread_id_creates_the_conversation_owned_by_the_caller_and_streams_its_first_turn(
    alice_client: APIClient, alice_scope: Scope
) -> None:
    """Before: 404 not_found, and nothing a frontend could do over AG-UI made the conversation."""
    conversation_id = uuid.uuid4()
    question = user("go")
    pairs, _ = read_stream(post(alice_client, conversation_id, run_input(conversation_id, question, forwarded_props={"agent": "scripted"})))
    events = [event for _, event in pairs]
    check_sequence(events)
    assert text_of(events) == ANSWER and events[-1].type == EventType.RUN_FINISHED
    conversation = Conversation.objects.get(pk=conversation_id)
    assert (conversation.tenant, conversation.owner, conversation.agent) == (alice_scope.tenant, alice_scope.user, "scripted")
    stored = list(Message.objects.filter(conversation_id=conversation_id).order_by("position").values_list("id", "role", "content"))
    assert stored[0] == (uuid.UUID(question["id"]), "user", "go") and [role for _, role, _ in stored] == ["user", "assistant"]
    assert Run.objects.filter(conversation_id=conversation_id).count() == 1


def test_a_new_user_message_on_a_known_thread_starts_the_next_turn_and_a_retry_starts_nothing(
    alice_client: APIClient, alice_scope: Scope
) -> None:
    conversation_id = conversation_store().create(alice_scope, agent="scripted").pk
    first = user("go", "not-a-uuid-1")  # AG-UI ids are any strings
    read_stream(post(alice_client, conversation_id, run_input(conversation_id, first)))
    pairs, _ = read_stream(post(alice_client, conversation_id, run_input(conversation_id, first, {"id": "a", "role": "assistant", "content": ANSWER}, user("again"))))
    assert text_of([event for _, event in pairs]) == ANSWER
    assert Run.objects.filter(conversation_id=conversation_id).count() == 2
    before = counts()
    again = run_input(conversation_id, first)  # the first run's request once more (its response was lost)
    events = [event for _, event in read_stream(post(alice_client, conversation_id, again))[0]]
    check_sequence(events)
    assert counts() == before, "a user message the conversation holds starts nothing"


def test_a_new_message_while_a_turn_runs_is_409_conversation_busy_and_writes_nothing(alice_client: APIClient) -> None:
    conversation_id = uuid.uuid4()
    response = post(alice_client, conversation_id, run_input(conversation_id, user("go"), forwarded_props={"agent": "scripted"}))
    assert response.status_code == 200
    before = counts()
    busy = post(alice_client, conversation_id, run_input(conversation_id, user("meanwhile")))
    assert (busy.status_code, busy.json()["code"]) == (409, "conversation_busy")
    assert counts() == before
    read_stream(response)


@pytest.mark.parametrize("where", ["another user", "another tenant"])
def test_a_run_on_someone_elses_thread_is_404_and_never_takes_it_over(
    alice_client: APIClient, bob_scope: Scope, where: str
) -> None:
    owner = bob_scope if where == "another user" else Scope(tenant="elsewhere", user=bob_scope.user)
    theirs = conversation_store().create(owner, agent="scripted")
    before = counts()
    response = post(alice_client, theirs.pk, run_input(theirs.pk, user("mine now?"), forwarded_props={"agent": "scripted"}))
    assert (response.status_code, response.json()["code"]) == (404, "not_found")
    # Without an agent it answers as a new id without one does (POST turns/'s rule): nothing tells them apart.
    blind = post(alice_client, theirs.pk, run_input(theirs.pk, user("mine now?")))
    fresh = post(alice_client, uuid.uuid4(), run_input("t", user("mine now?")))
    assert (blind.status_code, blind.json()["code"]) == (fresh.status_code, fresh.json()["code"]) == (400, "unknown_agent")
    assert counts() == before
    stored = Conversation.objects.get(pk=theirs.pk)
    assert (stored.tenant, stored.owner, stored.epoch) == (owner.tenant, owner.user, 0)


@pytest.mark.parametrize("path_id", ["not-a-uuid", "%00", "%ED%A0%80", "a" * 3000])
def test_a_malformed_thread_id_is_refused_and_creates_nothing(alice_client: APIClient, path_id: str) -> None:
    response = post(alice_client, path_id, run_input("t", user("go"), forwarded_props={"agent": "scripted"}))
    assert response.status_code in (400, 404) and response["Content-Type"].startswith("application/json")
    assert response.json()["code"] in ("invalid_id", "not_found")
    assert counts() == (0, 0, 0)


@pytest.mark.parametrize("content", ["bad \u0000 text", "\ud800"])
def test_hostile_content_is_400_and_creates_nothing(alice_client: APIClient, content: str) -> None:
    conversation_id = uuid.uuid4()
    response = alice_client.post(
        agui_url(conversation_id), data=(
            '{"threadId": "t", "runId": "r", "messages": [{"id": "u", "role": "user", "content": "%s"}], '
            '"forwardedProps": {"agent": "scripted"}}' % content.encode("unicode_escape").decode().replace("\\x00", "\\u0000")
        ), content_type="application/json",
    )
    assert response.status_code == 400, response.content
    assert counts() == (0, 0, 0)


def test_an_unknown_agent_or_a_bad_forwarded_agent_creates_nothing(alice_client: APIClient) -> None:
    conversation_id = uuid.uuid4()
    response = post(alice_client, conversation_id, run_input(conversation_id, user("go"), forwarded_props={"agent": "nobody"}))
    assert (response.status_code, response.json()["code"]) == (400, "unknown_agent")
    response = post(alice_client, conversation_id, run_input(conversation_id, user("go"), forwarded_props={"agent": 5}))
    assert response.status_code == 400 and response.json()["code"] == "invalid"
    assert counts() == (0, 0, 0)


def test_anonymous_runs_are_refused_and_create_nothing(anon_client: APIClient) -> None:
    conversation_id = uuid.uuid4()
    response = post(anon_client, conversation_id, run_input(conversation_id, user("go"), forwarded_props={"agent": "scripted"}))
    assert response.status_code in (401, 403)
    assert counts() == (0, 0, 0)


def test_a_get_on_a_new_id_starts_nothing_and_is_404(alice_client: APIClient) -> None:
    response = alice_client.get(agui_url(uuid.uuid4()))
    assert response.status_code == 404
    assert counts() == (0, 0, 0)
