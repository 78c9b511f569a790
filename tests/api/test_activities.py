"""The activity and reconstruct endpoints: a full overwrite over REST, a reload in one request, hostile input.

Every refused write is a 4xx with the app's JSON error body and leaves the
stored list as it was.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.urls import reverse

from agent_persistence.ids import uuid7
from agent_persistence.models import Activity
from agent_persistence.scope import Scope
from agent_persistence.stores import activity_store, conversation_store, interrupt_store, run_store
from agent_persistence.testing.family import claim_at, orm_stores

pytestmark = pytest.mark.django_db

NS = "agent_persistence"
DEEP = b'{"activities": [{"activity_type": "x", "content": ' + b'{"a":' * 1000 + b"1" + b"}" * 1000 + b"}]}"


def url(name: str, *args: Any) -> str:
    return reverse(f"{NS}:{name}", args=args)


@pytest.fixture
def conversation(alice_scope: Scope) -> uuid.UUID:
    return conversation_store().create(alice_scope, agent="echo", title="Search").pk


def stored(alice_scope: Scope, conversation_id: uuid.UUID) -> list[tuple[str, dict[str, Any]]]:
    return [(row.activity_type, row.content) for row in activity_store().list(alice_scope, conversation_id)]


def assert_error(response: Any, status: int, code: str | None = None) -> None:
    assert response.status_code == status, response.content[:500]
    assert response["Content-Type"].startswith("application/json")
    if code is not None:
        assert response.json()["code"] == code, response.json()


def test_put_replaces_the_list_and_get_returns_it(alice_client: Any, alice_scope: Scope, conversation: uuid.UUID) -> None:
    path = url("conversation-activities", conversation)
    kept, turn = str(uuid7()), str(uuid7())
    first = alice_client.put(path, {"activities": [
        {"id": kept, "activity_type": "web_search", "content": {"found": 1}, "message_id": turn},
        {"activity_type": "checklist", "content": {"steps": []}, "metadata": {"source": "ag-ui"}},
    ]}, format="json")
    assert first.status_code == 200, first.content
    rows = first.json()["activities"]
    assert [(row["id"], row["position"], row["revision"], row["message_id"]) for row in rows][0] == (kept, 0, 1, turn)
    assert rows[1]["metadata"] == {"source": "ag-ui"} and rows[1]["message_id"] is None
    second = alice_client.put(path, {"activities": [{"id": kept, "activity_type": "web_search", "content": {"found": 2}}]},
                              format="json")
    assert [(row["id"], row["revision"], row["content"]) for row in second.json()["activities"]] == [(kept, 2, {"found": 2})]
    listed = alice_client.get(path)
    assert listed.status_code == 200 and listed.json() == second.json()
    assert alice_client.get(path, {"message_id": turn}).json()["activities"] == []
    assert alice_client.put(path, {"activities": []}, format="json").json() == {"activities": []}
    assert stored(alice_scope, conversation) == []


@pytest.mark.parametrize(
    "body",
    [
        b'{"activities": [{"activity_type": "x", "colour": "red"}]}',
        b'{"activities": [{"activity_type": ""}]}',
        b'{"activities": [{"content": {}}]}',
        b'{"activities": [{"activity_type": "x", "content": [1]}]}',
        b'{"activities": [{"activity_type": "x", "id": "not-a-uuid"}]}',
        b'{"activities": {"activity_type": "x"}}',
        b'{"activities": [{"activity_type": 7}]}',
        b'{"list": []}',
        b'{"activities": [{"activity_type": "x", "content": {"t": "\\ud800"}}]}',
        b'{"activities": [{"activity_type": "x", "content": {"t": "a\\u0000b"}}]}',
        b'{"activities": [{"activity_type": "x", "content": {"n": 9223372036854775808}}]}',
        b'{"activities": [{"activity_type": "x", "content": {"n": 1e999}}]}',
        b'{"activities": [{"activity_type": "x", "content": {"n": NaN}}]}',
        DEEP,
        b"{",
    ],
)
def test_a_bad_body_is_400_and_leaves_the_list_as_it_was(
    alice_client: Any, alice_scope: Scope, conversation: uuid.UUID, body: bytes
) -> None:
    activity_store().save(alice_scope, conversation, [{"activity_type": "web_search", "content": {"found": 1}}])
    response = alice_client.generic("PUT", url("conversation-activities", conversation), body, content_type="application/json")
    assert_error(response, 400)
    assert stored(alice_scope, conversation) == [("web_search", {"found": 1})]


def test_an_id_twice_is_400_duplicate_activity_id(alice_client: Any, conversation: uuid.UUID) -> None:
    twice = str(uuid7())
    body = {"activities": [{"id": twice, "activity_type": "a"}, {"id": twice, "activity_type": "b"}]}
    assert_error(alice_client.put(url("conversation-activities", conversation), body, format="json"), 400, "duplicate_activity_id")
    assert Activity.objects.count() == 0


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", "application/xml"])
def test_a_body_that_is_not_json_is_415(alice_client: Any, conversation: uuid.UUID, content_type: str) -> None:
    response = alice_client.generic("PUT", url("conversation-activities", conversation), b'{"activities": []}',
                                    content_type=content_type)
    assert_error(response, 415, "unsupported_media_type")


def test_a_list_over_max_page_size_is_400(alice_client: Any, conversation: uuid.UUID, settings: Any) -> None:
    settings.AGENT_PERSISTENCE = {**settings.AGENT_PERSISTENCE, "MAX_PAGE_SIZE": 2}
    body = {"activities": [{"activity_type": "x"} for _ in range(3)]}
    assert_error(alice_client.put(url("conversation-activities", conversation), body, format="json"), 400, "too_many_activities")


def test_ids_that_name_nothing_are_404(alice_client: Any) -> None:
    for path in (url("conversation-activities", uuid7()), url("conversation-reconstruct", uuid7()),
                 url("conversation-activities", "not-a-uuid"), url("conversation-reconstruct", "nul\x00")):
        assert_error(alice_client.get(path), 404)


def test_reconstruct_returns_what_a_reload_repaints(alice_client: Any, alice_scope: Scope, conversation: uuid.UUID) -> None:
    conversations = conversation_store()
    conversations.append_message(alice_scope, conversation, role="user", content="research django")
    turn = uuid7()
    parent = run_store().create_or_resume(alice_scope, conversation, id=uuid7(), message_id=turn)
    child = run_store().create_or_resume(alice_scope, conversation, id=uuid7(), message_id=turn, parent_id=parent.pk,
                                         name="researcher")
    conversations.append_message(alice_scope, conversation, role="assistant", content="reading", run_id=child.pk)
    run_store().set_status(alice_scope, child.pk, "interrupted", transcript=[
        {"role": "user", "content": "find it"},
        {"role": "assistant", "content": "reading", "tool_calls": [{"id": "call-1", "name": "fetch", "arguments": {}}]},
    ])
    conversations.append_message(alice_scope, conversation, id=turn, role="assistant", content="a framework", run_id=parent.pk)
    pending = interrupt_store().create(alice_scope, conversation, id=uuid7(), run_id=child.pk, kind="tool_approval",
                                       payload={"tool_call_id": "call-1", "name": "fetch", "arguments": {}})
    activity_store().save(alice_scope, conversation, [{"activity_type": "web_search", "content": {"found": 3}, "message_id": turn}])
    claim_at(orm_stores(), conversation_store().get(alice_scope, conversation), 1, message_id=turn)

    body = alice_client.get(url("conversation-reconstruct", conversation)).json()
    assert body["conversation"]["id"] == str(conversation)
    assert [message["content"] for message in body["messages"]["items"]] == ["research django", "reading", "a framework"]
    assert body["messages"]["has_more"] is False
    assert [(row["activity_type"], row["content"]) for row in body["activities"]] == [("web_search", {"found": 3})]
    (card,) = body["subagents"]
    assert (card["run"]["id"], card["run"]["name"], card["run"]["message_id"]) == (str(child.pk), "researcher", str(turn))
    assert card["messages"] == [
        {"role": "user", "content": "find it"},
        {"role": "assistant", "content": "reading", "tool_calls": [{"id": "call-1", "name": "fetch", "arguments": {}}]},
    ]
    assert card["children"] == []
    assert [interrupt["id"] for interrupt in body["interrupts"]] == [str(pending.pk)]
    live = body["live_turn"]
    assert (live["state"], live["message_id"], live["epoch"], live["recording"]) == ("alive", str(turn), 1, None)

    page = alice_client.get(url("conversation-reconstruct", conversation), {"limit": 1}).json()
    assert [message["content"] for message in page["messages"]["items"]] == ["a framework"] and page["messages"]["has_more"]
    older = alice_client.get(url("conversation-reconstruct", conversation), {"limit": 2, "before": str(turn)}).json()
    assert [message["content"] for message in older["messages"]["items"]] == ["research django", "reading"]
    assert older["subagents"] == []


@pytest.mark.parametrize("query", [{"limit": "0"}, {"limit": "x"}, {"limit": "9" * 30}, {"before": "not-a-message"}])
def test_reconstruct_refuses_bad_paging(alice_client: Any, conversation: uuid.UUID, query: dict[str, str]) -> None:
    response = alice_client.get(url("conversation-reconstruct", conversation), query)
    assert response.status_code in (400, 404), response.content
    assert response["Content-Type"].startswith("application/json")


def test_the_schema_documents_both_operations(alice_client: Any) -> None:
    schema = alice_client.get(url("schema"), {"format": "json"}).json()
    operations = {operation["operationId"] for methods in schema["paths"].values() for operation in methods.values()
                  if isinstance(operation, dict) and "operationId" in operation}
    assert {"activities_list", "activities_save", "conversations_reconstruct"} <= operations
    assert "Reconstruction" in schema["components"]["schemas"]
