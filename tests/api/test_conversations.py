"""The conversation, message, share and event endpoints: success, failure and who may do what."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.urls import reverse

from agent_persistence.models import Conversation, Message
from agent_persistence.stores import conversation_store, event_store

pytestmark = pytest.mark.django_db

NS = "agent_persistence"


def url(name: str, *args: Any) -> str:
    return reverse(f"{NS}:{name}", args=args)


@pytest.fixture
def conversation(alice_scope: Any) -> Any:
    conversation = conversation_store().create(alice_scope, agent="echo", title="Hello")
    for text in ("one", "two", "three"):
        conversation_store().append_message(alice_scope, conversation.pk, role="user", content=text)
    return conversation


# -- conversations ----------------------------------------------------------------------------


def test_create_returns_201_with_the_conversation_and_its_etag(alice_client: Any, alice_user: Any) -> None:
    response = alice_client.post(
        url("conversation-list"),
        {"agent": "echo", "title": "T", "metadata": {"pinned": True}, "state": {"k": 1}, "shared": False,
         "action_due_at": "2030-01-01T00:00:00Z"},
        format="json",
    )
    assert response.status_code == 201
    body = response.json()
    assert body["agent"] == "echo" and body["title"] == "T" and body["pinned"] is True
    assert body["version"] == 0 and body["owner"] == str(alice_user.pk)
    assert body["action_due_at"] == "2030-01-01T00:00:00Z"
    assert response["ETag"] == '"0"'


def test_create_with_a_chosen_id_then_the_same_id_again_is_409(alice_client: Any) -> None:
    chosen = "01900000-0000-7000-8000-000000000001"
    assert alice_client.post(url("conversation-list"), {"id": chosen}, format="json").status_code == 201
    response = alice_client.post(url("conversation-list"), {"id": chosen}, format="json")
    assert response.status_code == 409
    assert response.json()["code"] == "conversation_exists"


@pytest.mark.parametrize(
    ("body", "code", "field"),
    [
        ({"title": 3}, "invalid", "title"),
        ({"shared": "yes"}, "invalid", "shared"),
        ({"metadata": [1]}, "invalid", "metadata"),
        ({"id": "not-a-uuid"}, "invalid", "id"),
        ({"action_due_at": "tomorrow"}, "invalid", "action_due_at"),
        ({"action_due_at": "2030-01-01T00:00:00"}, "invalid", "action_due_at"),
        ({"title": "x" * 501}, "invalid", "title"),
    ],
)
def test_create_with_a_wrong_type_is_400_invalid_and_writes_nothing(
    alice_client: Any, body: dict[str, Any], code: str, field: str
) -> None:
    response = alice_client.post(url("conversation-list"), body, format="json")
    assert response.status_code == 400
    assert response.json()["code"] == code
    details = response.json()["details"]
    assert details["field"] == field and field in details["errors"]
    assert Conversation.objects.count() == 0


def test_create_with_an_unknown_field_is_400_unknown_field(alice_client: Any) -> None:
    response = alice_client.post(url("conversation-list"), {"agent": "echo", "owner": "bob"}, format="json")
    assert response.status_code == 400
    assert response.json() == {
        "code": "unknown_field",
        "message": "Unknown field(s): owner.",
        "details": {"field": "owner", "fields": ["owner"]},
    }
    assert Conversation.objects.count() == 0


def test_malformed_json_is_400_malformed_request(alice_client: Any) -> None:
    response = alice_client.generic("POST", url("conversation-list"), "{nope", content_type="application/json")
    assert response.status_code == 400
    assert response.json()["code"] == "malformed_request"
    assert Conversation.objects.count() == 0


def test_a_json_body_that_is_not_an_object_is_400_invalid(alice_client: Any) -> None:
    response = alice_client.generic("POST", url("conversation-list"), "[1, 2]", content_type="application/json")
    assert response.status_code == 400
    assert response.json()["code"] == "invalid"


def test_an_oversize_json_body_is_413_too_large(alice_client: Any, settings: Any) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    body = json.dumps({"state": {"blob": "x" * 2000}})
    response = alice_client.generic("POST", url("conversation-list"), body, content_type="application/json")
    assert response.status_code == 413
    assert response.json()["code"] == "too_large"
    assert Conversation.objects.count() == 0


def test_a_state_over_max_state_bytes_is_413(alice_client: Any, settings: Any) -> None:
    settings.AGENT_PERSISTENCE = {**settings.AGENT_PERSISTENCE, "MAX_STATE_BYTES": 100}
    response = alice_client.post(url("conversation-list"), {"state": {"blob": "x" * 200}}, format="json")
    assert response.status_code == 413
    assert response.json()["code"] == "too_large"


def test_nul_characters_are_400_from_the_store(alice_client: Any) -> None:
    response = alice_client.post(url("conversation-list"), {"title": "a\u0000b"}, format="json")
    assert response.status_code == 400
    assert response.json()["code"] == "invalid"


def test_list_pages_orders_and_filters(alice_client: Any, alice_scope: Any, bob_scope: Any) -> None:
    store = conversation_store()
    first = store.create(alice_scope, agent="a")
    second = store.create(alice_scope, agent="b", metadata={"pinned": True})
    third = store.create(alice_scope, agent="a", action_due_at="2030-01-01T00:00:00+00:00")
    store.create(bob_scope, agent="a")  # not alice's

    body = alice_client.get(url("conversation-list")).json()
    assert [item["id"] for item in body["items"]] == [str(third.pk), str(second.pk), str(first.pk)]
    assert (body["total"], body["limit"], body["offset"], body["has_more"]) == (3, 100, 0, False)

    body = alice_client.get(url("conversation-list"), {"limit": 1, "offset": 1, "order": "asc"}).json()
    assert [item["id"] for item in body["items"]] == [str(second.pk)] and body["has_more"] is True

    body = alice_client.get(url("conversation-list"), {"pinned_first": "true", "order": "asc"}).json()
    assert [item["id"] for item in body["items"]] == [str(second.pk), str(first.pk), str(third.pk)]

    body = alice_client.get(url("conversation-list"), {"agent": "a"}).json()
    assert {item["id"] for item in body["items"]} == {str(first.pk), str(third.pk)}

    body = alice_client.get(url("conversation-list"), {"action_due_before": "2031-01-01T00:00:00Z"}).json()
    assert [item["id"] for item in body["items"]] == [str(third.pk)]


@pytest.mark.parametrize(
    "query",
    [
        {"limit": "abc"},
        {"limit": 0},
        {"limit": 100000},
        {"offset": -1},
        {"order": "sideways"},
        {"pinned_first": "maybe"},
        {"action_due_before": "soon"},
        {"action_due_before": "2030-01-01T00:00:00"},
    ],
)
def test_list_with_a_bad_query_is_400(alice_client: Any, query: dict[str, Any]) -> None:
    response = alice_client.get(url("conversation-list"), query)
    assert response.status_code == 400
    assert response.json()["code"] in ("invalid", "invalid_parameter")


def test_read_returns_the_conversation_a_page_of_messages_and_an_etag(alice_client: Any, conversation: Any) -> None:
    response = alice_client.get(url("conversation-detail", conversation.pk))
    assert response.status_code == 200
    assert response["ETag"] == '"0"'
    body = response.json()
    assert body["id"] == str(conversation.pk)
    assert [m["content"] for m in body["messages"]["items"]] == ["one", "two", "three"]
    assert body["messages"]["total"] == 3


def test_read_with_message_cursors(alice_client: Any, conversation: Any) -> None:
    ids = [m.id for m in Message.objects.filter(conversation=conversation).order_by("position")]
    body = alice_client.get(url("conversation-detail", conversation.pk), {"before": str(ids[2])}).json()
    assert [m["content"] for m in body["messages"]["items"]] == ["one", "two"]
    body = alice_client.get(url("conversation-detail", conversation.pk), {"after": str(ids[0])}).json()
    assert [m["content"] for m in body["messages"]["items"]] == ["two", "three"]
    body = alice_client.get(url("conversation-detail", conversation.pk), {"order": "desc", "limit": 1}).json()
    assert [m["content"] for m in body["messages"]["items"]] == ["three"] and body["messages"]["has_more"]


@pytest.mark.parametrize("cursor", ["nope", "01900000-0000-7000-8000-000000000001"])
def test_read_with_a_bad_cursor_is_404(alice_client: Any, conversation: Any, cursor: str) -> None:
    response = alice_client.get(url("conversation-detail", conversation.pk), {"before": cursor})
    assert response.status_code == 404
    assert response.json()["code"] == "not_found"


@pytest.mark.parametrize("conversation_id", ["not-a-uuid", "01900000-0000-7000-8000-000000000001"])
def test_a_bad_or_unknown_id_is_404_not_found(alice_client: Any, conversation_id: str) -> None:
    for response in (
        alice_client.get(url("conversation-detail", conversation_id)),
        alice_client.patch(url("conversation-detail", conversation_id), {}, format="json"),
        alice_client.delete(url("conversation-detail", conversation_id)),
        alice_client.get(url("message-list", conversation_id)),
        alice_client.get(url("event-list", conversation_id)),
    ):
        assert response.status_code == 404
        assert response.json()["code"] == "not_found"


def test_update_without_if_match(alice_client: Any, conversation: Any) -> None:
    response = alice_client.patch(url("conversation-detail", conversation.pk), {"title": "New"}, format="json")
    assert response.status_code == 200
    assert response.json()["title"] == "New" and response.json()["version"] == 1
    assert response["ETag"] == '"1"'


def test_update_with_a_matching_if_match(alice_client: Any, conversation: Any) -> None:
    response = alice_client.patch(
        url("conversation-detail", conversation.pk), {"metadata": {"pinned": True}}, format="json", HTTP_IF_MATCH='"0"'
    )
    assert response.status_code == 200
    assert response.json()["pinned"] is True and response.json()["version"] == 1


def test_update_with_a_stale_if_match_is_412_with_the_current_version_and_writes_nothing(
    alice_client: Any, conversation: Any, alice_scope: Any
) -> None:
    conversation_store().update(alice_scope, conversation.pk, title="Meanwhile")
    response = alice_client.patch(
        url("conversation-detail", conversation.pk), {"title": "Mine"}, format="json", HTTP_IF_MATCH='"0"'
    )
    assert response.status_code == 412
    assert response.json()["code"] == "version_mismatch"
    assert response.json()["details"] == {"current_version": 1}
    assert conversation_store().get(alice_scope, conversation.pk).title == "Meanwhile"


def test_update_with_a_malformed_if_match_is_400(alice_client: Any, conversation: Any) -> None:
    response = alice_client.patch(
        url("conversation-detail", conversation.pk), {"title": "x"}, format="json", HTTP_IF_MATCH="yesterday"
    )
    assert response.status_code == 400
    assert response.json()["code"] == "invalid"


def test_update_with_an_unknown_field_is_400_and_writes_nothing(alice_client: Any, conversation: Any, alice_scope: Any) -> None:
    response = alice_client.patch(url("conversation-detail", conversation.pk), {"version": 7}, format="json")
    assert response.status_code == 400
    assert response.json()["code"] == "unknown_field"
    assert conversation_store().get(alice_scope, conversation.pk).version == 0


def test_delete_is_204_then_404(alice_client: Any, conversation: Any) -> None:
    assert alice_client.delete(url("conversation-detail", conversation.pk)).status_code == 204
    assert alice_client.get(url("conversation-detail", conversation.pk)).status_code == 404
    assert alice_client.delete(url("conversation-detail", conversation.pk)).status_code == 404


def test_share_lets_bob_read_and_unshare_hides_it_again(alice_client: Any, bob_client: Any, conversation: Any) -> None:
    assert bob_client.get(url("conversation-detail", conversation.pk)).status_code == 404
    response = alice_client.post(url("conversation-share", conversation.pk))
    assert response.status_code == 200 and response.json()["shared"] is True and response.json()["version"] == 1
    assert bob_client.get(url("conversation-detail", conversation.pk)).status_code == 200
    response = alice_client.delete(url("conversation-share", conversation.pk))
    assert response.status_code == 200 and response.json()["shared"] is False
    assert bob_client.get(url("conversation-detail", conversation.pk)).status_code == 404


# -- messages ---------------------------------------------------------------------------------


def test_append_message_is_201(alice_client: Any, conversation: Any) -> None:
    response = alice_client.post(
        url("message-list", conversation.pk),
        {"role": "assistant", "content": {"text": "hi"}, "tool_calls": [{"id": "c1"}], "usage": {"tokens": 3},
         "metadata": {"a": 1}, "name": "bot"},
        format="json",
    )
    assert response.status_code == 201
    body = response.json()
    assert body["position"] == 3 and body["role"] == "assistant" and body["content"] == {"text": "hi"}
    assert body["conversation_id"] == str(conversation.pk)


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"content": "x"}, "invalid"),
        ({"role": "wizard", "content": "x"}, "invalid"),
        ({"role": "user"}, "invalid"),
        ({"role": "user", "content": "x", "tool_calls": {"a": 1}}, "invalid"),
        ({"role": "user", "content": "x", "position": 0}, "unknown_field"),
        ({"role": "user", "content": "x", "id": "nope"}, "invalid"),
    ],
)
def test_append_message_with_bad_input_is_400_and_writes_nothing(
    alice_client: Any, conversation: Any, body: dict[str, Any], code: str
) -> None:
    response = alice_client.post(url("message-list", conversation.pk), body, format="json")
    assert response.status_code == 400
    assert response.json()["code"] == code
    assert Message.objects.filter(conversation=conversation).count() == 3


def test_append_message_over_max_message_bytes_is_413(alice_client: Any, conversation: Any, settings: Any) -> None:
    settings.AGENT_PERSISTENCE = {**settings.AGENT_PERSISTENCE, "MAX_MESSAGE_BYTES": 100}
    response = alice_client.post(url("message-list", conversation.pk), {"role": "user", "content": "x" * 200}, format="json")
    assert response.status_code == 413
    assert response.json()["code"] == "too_large"


def test_append_message_with_a_taken_id_is_409(alice_client: Any, conversation: Any) -> None:
    taken = str(Message.objects.filter(conversation=conversation).first().pk)
    response = alice_client.post(url("message-list", conversation.pk), {"role": "user", "content": "x", "id": taken}, format="json")
    assert response.status_code == 409
    assert response.json()["code"] == "message_exists"


def test_list_messages(alice_client: Any, conversation: Any) -> None:
    body = alice_client.get(url("message-list", conversation.pk), {"limit": 2}).json()
    assert [m["content"] for m in body["items"]] == ["one", "two"] and body["has_more"] is True


def test_update_and_delete_a_message(alice_client: Any, conversation: Any) -> None:
    message = Message.objects.filter(conversation=conversation).order_by("position").first()
    response = alice_client.patch(
        url("message-detail", conversation.pk, message.pk), {"content": "ONE", "metadata": {"edited": True}}, format="json"
    )
    assert response.status_code == 200
    assert response.json()["content"] == "ONE" and response.json()["metadata"] == {"edited": True}
    response = alice_client.patch(url("message-detail", conversation.pk, message.pk), {"role": "system"}, format="json")
    assert response.status_code == 400 and response.json()["code"] == "unknown_field"
    assert alice_client.delete(url("message-detail", conversation.pk, message.pk)).status_code == 204
    assert alice_client.delete(url("message-detail", conversation.pk, message.pk)).status_code == 404
    assert alice_client.patch(url("message-detail", conversation.pk, "nope"), {}, format="json").status_code == 404


# -- events -----------------------------------------------------------------------------------


def test_events_by_cursor_and_type(alice_client: Any, conversation: Any, alice_scope: Any) -> None:
    event_store().append(alice_scope, conversation.pk, [{"type": "a"}, {"type": "b", "data": {"x": 1}}, {"type": "a"}])
    body = alice_client.get(url("event-list", conversation.pk)).json()
    assert [e["seq"] for e in body["events"]] == [1, 2, 3] and body["last_seq"] == 3 and body["has_more"] is False
    body = alice_client.get(url("event-list", conversation.pk), {"after": 1, "limit": 1}).json()
    assert [e["seq"] for e in body["events"]] == [2] and body["events"][0]["data"] == {"x": 1} and body["has_more"]
    body = alice_client.get(url("event-list", conversation.pk), {"types": "a"}).json()
    assert [e["seq"] for e in body["events"]] == [1, 3]
    body = alice_client.get(url("event-list", conversation.pk), {"order": "desc", "before": 3}).json()
    assert [e["seq"] for e in body["events"]] == [2, 1] and body["last_seq"] == 1


@pytest.mark.parametrize("query", [{"after": "x"}, {"after": -1}, {"before": "1.5"}, {"limit": 0}, {"order": "up"}])
def test_events_with_a_bad_cursor_is_400(alice_client: Any, conversation: Any, query: dict[str, Any]) -> None:
    response = alice_client.get(url("event-list", conversation.pk), query)
    assert response.status_code == 400
    assert response.json()["code"] in ("invalid", "invalid_parameter")


# -- the authorization matrix -----------------------------------------------------------------

# (name, method, path builder, body): every endpoint of this module.
ENDPOINTS: list[tuple[str, str, Any, Any]] = [
    ("list", "get", lambda c, m: url("conversation-list"), None),
    ("create", "post", lambda c, m: url("conversation-list"), {"agent": "echo"}),
    ("read", "get", lambda c, m: url("conversation-detail", c), None),
    ("update", "patch", lambda c, m: url("conversation-detail", c), {"title": "x"}),
    ("delete", "delete", lambda c, m: url("conversation-detail", c), None),
    ("share", "post", lambda c, m: url("conversation-share", c), None),
    ("unshare", "delete", lambda c, m: url("conversation-share", c), None),
    ("messages", "get", lambda c, m: url("message-list", c), None),
    ("append", "post", lambda c, m: url("message-list", c), {"role": "user", "content": "x"}),
    ("edit message", "patch", lambda c, m: url("message-detail", c, m), {"content": "x"}),
    ("delete message", "delete", lambda c, m: url("message-detail", c, m), None),
    ("events", "get", lambda c, m: url("event-list", c), None),
]

# Expected status by endpoint for: owner, other user of the tenant, reader of the shared
# conversation, a user of another tenant (with the owner's user id), anonymous.
EXPECTED: dict[str, tuple[int, int, int, int, int]] = {
    "list": (200, 200, 200, 200, 403),
    "create": (201, 201, 201, 201, 403),
    "read": (200, 404, 200, 404, 403),
    "update": (200, 404, 403, 404, 403),
    "delete": (204, 404, 403, 404, 403),
    "share": (200, 404, 403, 404, 403),
    "unshare": (200, 404, 403, 404, 403),
    "messages": (200, 404, 200, 404, 403),
    "append": (201, 404, 403, 404, 403),
    "edit message": (200, 404, 403, 404, 403),
    "delete message": (204, 404, 403, 404, 403),
    "events": (200, 404, 200, 404, 403),
}
ACTORS = ["owner", "tenant user", "shared reader", "other tenant", "anonymous"]


@pytest.mark.parametrize("actor", ACTORS)
@pytest.mark.parametrize(("name", "method", "path", "body"), ENDPOINTS, ids=[e[0] for e in ENDPOINTS])
def test_authorization_matrix(
    name: str, method: str, path: Any, body: Any, actor: str,
    alice_user: Any, bob_user: Any, mallory_user: Any, alice_scope: Any, client_for: Any,
) -> None:
    conversation = conversation_store().create(alice_scope, agent="echo", shared=actor == "shared reader")
    message = conversation_store().append_message(alice_scope, conversation.pk, role="user", content="hi")
    user = {"owner": alice_user, "tenant user": bob_user, "shared reader": bob_user,
            "other tenant": mallory_user, "anonymous": None}[actor]
    before = (Conversation.objects.count(), Message.objects.count(), conversation_store().get(alice_scope, conversation.pk).version)
    response = getattr(client_for(user), method)(path(conversation.pk, message.pk), body, format="json")
    expected = EXPECTED[name][ACTORS.index(actor)]
    assert response.status_code == expected, response.content
    if response.status_code >= 400:
        assert set(response.json()) >= {"code", "message"}
        after = (Conversation.objects.count(), Message.objects.count(), conversation_store().get(alice_scope, conversation.pk).version)
        assert after == before
    if actor == "other tenant" and name == "list":
        assert response.json()["total"] == 0
    if actor == "shared reader" and expected == 403:
        assert response.json()["code"] == "conversation_not_owned"
    if actor == "anonymous":
        assert response.json()["code"] == "not_authenticated"
