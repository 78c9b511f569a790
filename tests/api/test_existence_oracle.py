"""No existence oracle across scopes: the answer to an id never tells whose it is, or that a hidden row exists.

Ids are global (a conversation or message is addressed by its id alone), so a
client-chosen id that is taken cannot be given out again. The rule: a taken id
gets one answer, byte for byte the same whoever holds it (the caller, another
user of the tenant, another tenant), with no details naming the row; and an
id the caller may not see, where the request does not try to take it, answers
exactly like an id nobody holds.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from agent_persistence.models import Conversation, Message
from agent_persistence.scope import Scope
from agent_persistence.stores import conversation_store

pytestmark = pytest.mark.django_db

NS = "agent_persistence"
FRESH_ID = "01900000-0000-7000-8000-00000000abcd"


def url(name: str, *args: Any) -> str:
    return reverse(f"{NS}:{name}", args=args)


@pytest.fixture
def holders(alice_scope: Scope, bob_scope: Scope, mallory_user: Any) -> dict[str, Any]:
    """A conversation with one message for each of: alice herself, bob (her tenant), mallory (another tenant)."""
    mallory_scope = Scope(tenant="other", user=mallory_user.first_name)
    rows = {}
    for name, scope in (("own", alice_scope), ("tenant_user", bob_scope), ("other_tenant", mallory_scope)):
        conversation = conversation_store().create(scope, agent="echo", title=name)
        message = conversation_store().append_message(scope, conversation.pk, role="user", content=name)
        rows[name] = {"conversation": str(conversation.pk), "message": str(message.pk)}
    return rows


def answer(response: Any) -> tuple[int, bytes]:
    return response.status_code, response.content


def test_creating_a_conversation_with_a_taken_id_answers_the_same_whoever_holds_it(
    alice_client: Any, holders: dict[str, Any]
) -> None:
    answers = {
        name: answer(alice_client.post(url("conversation-list"), {"id": row["conversation"]}, format="json"))
        for name, row in holders.items()
    }
    assert answers["own"][0] == 409
    assert answers["tenant_user"] == answers["own"] and answers["other_tenant"] == answers["own"], answers
    body = alice_client.post(url("conversation-list"), {"id": holders["other_tenant"]["conversation"]}, format="json").json()
    assert body["code"] == "conversation_exists" and "details" not in body
    assert Conversation.objects.get(pk=holders["other_tenant"]["conversation"]).title == "other_tenant"


def test_a_taken_message_id_answers_the_same_whoever_holds_it_and_names_no_row(
    alice_client: Any, holders: dict[str, Any]
) -> None:
    target = holders["own"]["conversation"]
    answers = {}
    for name, row in holders.items():
        response = alice_client.post(url("message-list", target), {"role": "user", "content": "x", "id": row["message"]}, format="json")
        answers[name] = answer(response)
    assert answers["own"][0] == 409
    assert answers["tenant_user"] == answers["own"] and answers["other_tenant"] == answers["own"], answers
    body = alice_client.post(
        url("message-list", target), {"role": "user", "content": "x", "id": holders["other_tenant"]["message"]}, format="json"
    ).json()
    assert body["code"] == "message_exists" and "details" not in body
    assert Message.objects.filter(conversation_id=target).count() == 1


@pytest.mark.parametrize("holder", ["tenant_user", "other_tenant"])
def test_reads_and_writes_of_a_hidden_conversation_answer_like_an_unknown_id(
    alice_client: Any, holders: dict[str, Any], holder: str
) -> None:
    hidden = holders[holder]["conversation"]
    for method, name, body in [
        ("get", "conversation-detail", None),
        ("patch", "conversation-detail", {"title": "x"}),
        ("delete", "conversation-detail", None),
        ("get", "message-list", None),
        ("post", "message-list", {"role": "user", "content": "x"}),
        ("get", "event-list", None),
        ("get", "conversation-runs", None),
        ("get", "conversation-stream", None),
        ("post", "conversation-share", None),
        ("get", "file-list", None),
    ]:
        client_call = getattr(alice_client, method)
        kwargs = {"format": "json"} if body is not None else {}
        args = (body,) if body is not None else ()
        on_hidden = answer(client_call(url(name, hidden), *args, **kwargs))
        on_unknown = answer(client_call(url(name, FRESH_ID), *args, **kwargs))
        assert on_hidden == on_unknown, (method, name, on_hidden, on_unknown)
        assert on_hidden[0] == 404


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("holder", ["tenant_user", "other_tenant"])
def test_a_turn_start_without_agent_answers_the_same_whether_or_not_the_id_exists_elsewhere(
    drained_producer_loop: None, alice_client: Any, holders: dict[str, Any], holder: str
) -> None:
    """Without ``agent`` a start takes the conversation's agent only when the caller may read it; anyone else's id
    answers exactly like a fresh one (400 unknown_agent), and nothing is written."""
    messages_before = Message.objects.count()
    on_hidden = answer(alice_client.post(url("turn-start", holders[holder]["conversation"]), {"content": "hi"}, format="json"))
    on_fresh = answer(alice_client.post(url("turn-start", FRESH_ID), {"content": "hi"}, format="json"))
    assert on_hidden == on_fresh, (on_hidden, on_fresh)
    assert on_hidden[0] == 400
    assert Message.objects.count() == messages_before
    assert not Conversation.objects.filter(pk=FRESH_ID).exists()
