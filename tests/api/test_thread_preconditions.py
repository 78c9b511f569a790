"""Issue 21 item 7 over HTTP: thread saves (PUT / PATCH conversations/<id>/messages/) and the running turn.

(a)/(b) a save mid-turn is 409 ``turn_running`` and writes nothing; (c) If-Match
is honoured on PUT and PATCH: the message list's ETag (the thread tag) or the
conversation's version; a stale one is 412 ``version_mismatch`` (a PUT made
from the thread read before the seal no longer deletes the answer).
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.urls import reverse

from agent_persistence.stores import conversation_store, turn_store
from agent_persistence.stores.conversations import ConversationStore
from agent_persistence.stores.memory.conversations import MemoryConversationStore
from agent_persistence.stores.memory.database import MemoryDatabase
from agent_persistence.testing.turns import COMPLETED

# The conversation store is swapped alone, with the deprecated CONVERSATION_STORE key (STORES names whole families).
pytestmark = [pytest.mark.django_db, pytest.mark.filterwarnings("ignore:AGENT_PERSISTENCE.*is deprecated:DeprecationWarning")]


def url(pk: Any) -> str:
    return reverse("agent_persistence:message-list", args=[pk])


def contents(client: Any, pk: Any) -> list[Any]:
    return [item["content"] for item in client.get(url(pk)).json()["items"]]


@pytest.fixture
def turn(alice_scope: Any) -> Any:
    conversation = conversation_store().create(alice_scope, agent="echo")
    return turn_store().begin(alice_scope, conversation.pk, content="question", known_agents={"echo"}, agent="echo")


def seal(scope: Any, plan: Any) -> None:
    assert turn_store().seal(scope, plan.conversation_id, message_id=plan.message_id, run_id=plan.run_id,
                             epoch=plan.epoch, message={"content": "the answer"}, seal=COMPLETED, stop_reason="end_turn")


@pytest.mark.parametrize("method", ["put", "patch"])
def test_a_save_mid_turn_is_409_turn_running(alice_client: Any, alice_scope: Any, turn: Any, method: str) -> None:
    pk = turn.conversation_id
    bodies = [
        {"messages": [{"role": "user", "content": "question"},
                      {"id": str(turn.message_id), "role": "assistant", "content": "the ans"}]},
        {"messages": []} if method == "put" else {"messages": [{"role": "user", "content": "more"}]},
    ]
    for body in bodies:
        response = getattr(alice_client, method)(url(pk), body, format="json")
        assert response.status_code == 409, response.content
        assert response.json()["code"] == "turn_running"
        assert response.json()["details"]["message_id"] == str(turn.message_id)
        assert contents(alice_client, pk) == ["question"]
    seal(alice_scope, turn)
    assert contents(alice_client, pk) == ["question", "the answer"]


@pytest.mark.parametrize("method", ["put", "patch"])
def test_a_stale_save_after_the_seal_is_412(alice_client: Any, alice_scope: Any, turn: Any, method: str) -> None:
    pk = turn.conversation_id
    read = alice_client.get(url(pk))
    tag, thread = read["ETag"], read.json()["items"]
    seal(alice_scope, turn)
    stale = {"messages": [{"id": item["id"], "role": item["role"], "content": item["content"]} for item in thread]}
    response = getattr(alice_client, method)(url(pk), stale, format="json", HTTP_IF_MATCH=tag)
    assert response.status_code == 412, response.content
    assert response.json()["code"] == "version_mismatch"
    assert contents(alice_client, pk) == ["question", "the answer"]
    fresh = alice_client.get(url(pk))
    saved = getattr(alice_client, method)(url(pk), {"messages": fresh.json()["items"][:1] and [
        {"id": item["id"], "role": item["role"], "content": item["content"]} for item in fresh.json()["items"]]},
        format="json", HTTP_IF_MATCH=fresh["ETag"])
    assert saved.status_code == 200, saved.content
    assert saved["ETag"] and saved["ETag"] != fresh["ETag"] or method == "patch"


@pytest.mark.parametrize("method", ["put", "patch"])
def test_a_wrong_version_in_if_match_is_412_and_the_right_one_saves(alice_client: Any, alice_scope: Any,
                                                                     method: str) -> None:
    conversation = conversation_store().create(alice_scope, agent="echo")
    body = {"messages": [{"role": "user", "content": "x"}]}
    response = getattr(alice_client, method)(url(conversation.pk), body, format="json", HTTP_IF_MATCH='"7"')
    assert (response.status_code, response.json()["code"]) == (412, "version_mismatch")
    assert contents(alice_client, conversation.pk) == []
    response = getattr(alice_client, method)(url(conversation.pk), body, format="json", HTTP_IF_MATCH='"0"')
    assert response.status_code == 200
    bad = getattr(alice_client, method)(url(conversation.pk), body, format="json", HTTP_IF_MATCH="nonsense")
    assert (bad.status_code, bad.json()["code"], bad.json()["details"]["field"]) == (400, "invalid", "If-Match")


def test_an_append_moves_the_thread_tag(alice_client: Any, alice_scope: Any) -> None:
    conversation = conversation_store().create(alice_scope, agent="echo")
    first = alice_client.get(url(conversation.pk))["ETag"]
    conversation_store().append_message(alice_scope, conversation.pk, role="user", content="x")
    assert alice_client.get(url(conversation.pk))["ETag"] != first
    response = alice_client.put(url(conversation.pk), {"messages": []}, format="json", HTTP_IF_MATCH=first)
    assert response.status_code == 412 and contents(alice_client, conversation.pk) == ["x"]


# -- review of 844909d: edits and deletes move the tag; the save's ETag names its body; families agree ----------

FAMILIES = {
    "orm": "agent_persistence.stores.conversations.ConversationStore",
    "memory": "tests.api.test_thread_preconditions.FreshMemoryConversationStore",
}


class FreshMemoryConversationStore(MemoryConversationStore):
    def __init__(self) -> None:
        super().__init__(MemoryDatabase())


def append_after_saves(cls: type) -> type:
    """A real store of the family whose saves are followed, once committed, by another client's append.

    The append is a real, committed write between the save and the answer: what a concurrent
    client can do at that moment. The answer's ETag must still name the body answered.
    """

    class AppendsAfterEachSave(cls):  # type: ignore[misc, valid-type]
        def replace_messages(self, scope: Any, conversation_id: Any, *args: Any, **kwargs: Any) -> Any:
            saved = super().replace_messages(scope, conversation_id, *args, **kwargs)
            self.append_message(scope, conversation_id, role="user", content="appended meanwhile")
            return saved

        def merge_messages(self, scope: Any, conversation_id: Any, *args: Any, **kwargs: Any) -> Any:
            saved = super().merge_messages(scope, conversation_id, *args, **kwargs)
            self.append_message(scope, conversation_id, role="user", content="appended meanwhile")
            return saved

    return AppendsAfterEachSave


class OrmAppendsAfterEachSave(append_after_saves(ConversationStore)):  # type: ignore[misc]
    pass


class MemoryAppendsAfterEachSave(append_after_saves(FreshMemoryConversationStore)):  # type: ignore[misc]
    pass


@pytest.fixture(params=sorted(FAMILIES))
def family(request: Any, settings: Any) -> str:
    settings.AGENT_PERSISTENCE = {**settings.AGENT_PERSISTENCE, "CONVERSATION_STORE": FAMILIES[request.param]}
    return request.param


def use_store(settings: Any, path: str) -> None:
    settings.AGENT_PERSISTENCE = {**settings.AGENT_PERSISTENCE, "CONVERSATION_STORE": path}


@pytest.mark.parametrize("change", ["edit", "delete"])
@pytest.mark.parametrize("method", ["put", "patch"])
def test_a_save_read_before_an_edit_or_a_delete_is_412(alice_client: Any, alice_scope: Any, family: str,
                                                       method: str, change: str) -> None:
    store = conversation_store()
    conversation = store.create(alice_scope, agent="echo")
    m1 = store.append_message(alice_scope, conversation.pk, role="user", content="m1")
    m2 = store.append_message(alice_scope, conversation.pk, role="assistant", content="m2")
    read = alice_client.get(url(conversation.pk))
    stale = {"messages": [{"id": i["id"], "role": i["role"], "content": i["content"]} for i in read.json()["items"]]}
    if change == "edit":
        assert alice_client.patch(reverse("agent_persistence:message-detail", args=[conversation.pk, m2.pk]),
                                  {"content": "m2 edited"}, format="json").status_code == 200
        after = ["m1", "m2 edited"]
    else:
        assert alice_client.delete(reverse("agent_persistence:message-detail",
                                           args=[conversation.pk, m1.pk])).status_code == 204
        after = ["m2"]
    assert alice_client.get(url(conversation.pk))["ETag"] != read["ETag"]
    response = getattr(alice_client, method)(url(conversation.pk), stale, format="json", HTTP_IF_MATCH=read["ETag"])
    assert (response.status_code, response.json()["code"]) == (412, "version_mismatch"), response.content
    assert contents(alice_client, conversation.pk) == after


@pytest.mark.parametrize("method", ["put", "patch"])
@pytest.mark.parametrize("store_path", ["tests.api.test_thread_preconditions.OrmAppendsAfterEachSave",
                                        "tests.api.test_thread_preconditions.MemoryAppendsAfterEachSave"])
def test_the_etag_of_a_save_names_the_body_answered(alice_client: Any, alice_scope: Any, settings: Any,
                                                    method: str, store_path: str) -> None:
    use_store(settings, store_path)
    conversation = conversation_store().create(alice_scope, agent="echo")
    body = {"messages": [{"role": "user", "content": "saved"}]}
    saved = getattr(alice_client, method)(url(conversation.pk), body, format="json")
    assert saved.status_code == 200, saved.content
    assert [item["content"] for item in saved.json()["items"]] == ["saved"]
    # The append committed after the save is not in the body, so the ETag must not cover it either.
    assert contents(alice_client, conversation.pk) == ["saved", "appended meanwhile"]
    assert saved["ETag"] != alice_client.get(url(conversation.pk))["ETag"]
    # So the client's next save, made from that answer, is refused instead of deleting the append.
    again = {"messages": [{"id": i["id"], "role": i["role"], "content": i["content"]} for i in saved.json()["items"]]}
    response = getattr(alice_client, method)(url(conversation.pk), again, format="json", HTTP_IF_MATCH=saved["ETag"])
    assert (response.status_code, response.json()["code"]) == (412, "version_mismatch"), response.content
    assert contents(alice_client, conversation.pk) == ["saved", "appended meanwhile"]


@pytest.mark.parametrize("if_match", ['"0"', '"0.0.0.0"'])
def test_an_empty_patch_with_create_and_if_match_on_an_absent_conversation_is_404(alice_client: Any, family: str,
                                                                                  if_match: str) -> None:
    pk = uuid.uuid4()
    response = alice_client.patch(url(pk), {"messages": [], "create": True}, format="json", HTTP_IF_MATCH=if_match)
    assert (response.status_code, response.json()["code"]) == (404, "not_found"), response.content
    assert alice_client.get(url(pk)).status_code == 404
