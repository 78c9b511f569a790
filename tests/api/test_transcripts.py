"""Whole-thread saves over HTTP: ``PUT`` (full overwrite) and ``PATCH`` (merge by id) of a conversation's messages.

Success, the imported ``created_at``, the page the answer carries, who may save
(404 for a conversation the caller may not see, 403 for a reader of a shared
one), payload limits, and hostile bodies: every refusal is a 4xx with the
app's JSON error body and writes nothing.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from typing import Any

import pytest
from django.urls import reverse
from django.utils import timezone

from agent_persistence.models import Conversation, Message
from agent_persistence.scope import Scope
from agent_persistence.stores import conversation_store

from .test_hostile_input import DEEP_1K, DEEP_100K, HOSTILE_STRINGS, assert_error

pytestmark = pytest.mark.django_db

NS = "agent_persistence"
SAVES = ("PUT", "PATCH")


def url(name: str, *args: Any) -> str:
    return reverse(f"{NS}:{name}", args=args)


@pytest.fixture
def conversation(alice_scope: Scope) -> Any:
    conversation = conversation_store().create(alice_scope, agent="echo", title="Thread")
    for role, text in (("user", "u1"), ("assistant", "a1"), ("user", "u2"), ("assistant", "a2")):
        conversation_store().append_message(alice_scope, conversation.pk, role=role, content=text)
    return conversation


def stored(conversation: Any) -> list[tuple[str, Any, int]]:
    """The transcript as the database holds it: (id, content, position), in position order."""
    rows = Message.objects.filter(conversation_id=conversation.pk).order_by("position")
    return [(str(row.id), row.content, row.position) for row in rows]


def ids_of(conversation: Any) -> list[str]:
    return [message_id for message_id, _, _ in stored(conversation)]


def save(client: Any, method: str, conversation_id: Any, body: Any, query: str = "") -> Any:
    path = url("message-list", conversation_id) + query
    return client.generic(method, path, json.dumps(body), content_type="application/json")


# -- what the saves do --------------------------------------------------------------------------


def test_put_makes_the_transcript_exactly_the_list(alice_client: Any, conversation: Any) -> None:
    u1, a1, u2, a2 = ids_of(conversation)
    body = {
        "messages": [
            {"id": a1, "role": "assistant", "content": "a1 edited"},
            {"id": u1, "role": "user", "content": "u1"},
            {"role": "user", "content": "new"},
        ]
    }
    response = save(alice_client, "PUT", conversation.pk, body)
    assert response.status_code == 200, response.content
    page = response.json()
    assert (page["total"], page["offset"], page["has_more"]) == (3, 0, False)
    assert [(m["content"], m["position"]) for m in page["items"]] == [("a1 edited", 0), ("u1", 1), ("new", 2)]
    assert [content for _, content, _ in stored(conversation)] == ["a1 edited", "u1", "new"]
    assert ids_of(conversation)[:2] == [a1, u1]
    assert not Message.objects.filter(pk__in=[u2, a2]).exists()


def test_patch_merges_by_id_with_the_cutoff(alice_client: Any, conversation: Any) -> None:
    """A reload posts the last user message: the old answer after it goes, the new one follows."""
    u1, a1, u2, a2 = ids_of(conversation)
    body = {"messages": [{"id": u2, "role": "user", "content": "u2"}, {"role": "assistant", "content": "a2 again"}]}
    response = save(alice_client, "PATCH", conversation.pk, body)
    assert response.status_code == 200, response.content
    assert [m["content"] for m in response.json()["items"]] == ["u1", "a1", "u2", "a2 again"]
    assert [position for _, _, position in stored(conversation)] == [0, 1, 2, 3]
    assert not Message.objects.filter(pk=a2).exists()


def test_patch_without_a_stored_id_is_a_new_turn_and_an_empty_list_changes_nothing(
    alice_client: Any, conversation: Any
) -> None:
    before = stored(conversation)
    updated_at = Conversation.objects.get(pk=conversation.pk).updated_at
    response = save(alice_client, "PATCH", conversation.pk, {"messages": []})
    assert response.status_code == 200 and response.json()["total"] == 4
    assert stored(conversation) == before
    assert Conversation.objects.get(pk=conversation.pk).updated_at == updated_at
    response = save(alice_client, "PATCH", conversation.pk, {"messages": [{"role": "user", "content": "u3"}]})
    assert [m["content"] for m in response.json()["items"]] == ["u1", "a1", "u2", "a2", "u3"]


def test_put_of_an_empty_list_empties_the_transcript(alice_client: Any, conversation: Any) -> None:
    response = save(alice_client, "PUT", conversation.pk, {"messages": []})
    assert response.status_code == 200 and response.json()["items"] == []
    assert stored(conversation) == []
    assert Conversation.objects.filter(pk=conversation.pk).exists()


@pytest.mark.parametrize("method", SAVES)
def test_create_makes_an_absent_conversation_and_without_it_is_404(alice_client: Any, method: str) -> None:
    absent = uuid.uuid4()
    body = {"messages": [{"role": "user", "content": "hi"}]}
    assert_error(save(alice_client, method, absent, body), 404, "not_found")
    assert not Conversation.objects.filter(pk=absent).exists()
    response = save(alice_client, method, absent, {**body, "create": True, "agent": "echo"})
    assert response.status_code == 200, response.content
    assert Conversation.objects.get(pk=absent).agent == "echo"


@pytest.mark.parametrize("method", SAVES)
def test_the_answer_is_a_page_chosen_by_the_query(alice_client: Any, conversation: Any, method: str) -> None:
    body = {"messages": [{"role": "user", "content": f"m{i}"} for i in range(5)]}
    response = save(alice_client, "PUT", conversation.pk, body)
    response = save(alice_client, method, conversation.pk, body if method == "PUT" else {"messages": []}, "?order=desc&limit=2&offset=1")
    page = response.json()
    assert [m["content"] for m in page["items"]] == ["m3", "m2"]
    assert (page["total"], page["limit"], page["offset"], page["has_more"]) == (5, 2, 1, True)


@pytest.mark.parametrize("query", ["?limit=0", "?limit=abc", "?offset=-1", "?order=sideways", f"?limit={10**30}"])
@pytest.mark.parametrize("method", SAVES)
def test_a_bad_paging_query_is_400_before_anything_is_written(
    alice_client: Any, conversation: Any, method: str, query: str
) -> None:
    before = stored(conversation)
    response = save(alice_client, method, conversation.pk, {"messages": [{"role": "user", "content": "x"}]}, query)
    assert response.status_code == 400, response.content
    assert stored(conversation) == before


# -- imported times ------------------------------------------------------------------------------


@pytest.mark.parametrize("method", SAVES)
def test_a_created_at_is_kept_and_the_list_order_stays(alice_client: Any, conversation: Any, method: str) -> None:
    body = {
        "messages": [
            {"role": "user", "content": "later", "created_at": "2024-01-02T12:00:00Z"},
            {"role": "assistant", "content": "earlier", "created_at": "2024-01-01T09:30:00+01:00"},
        ]
    }
    response = save(alice_client, method, conversation.pk, body)
    assert response.status_code == 200, response.content
    items = response.json()["items"][-2:]
    assert [(m["content"], m["created_at"]) for m in items] == [
        ("later", "2024-01-02T12:00:00Z"),
        ("earlier", "2024-01-01T08:30:00Z"),
    ]
    listed = alice_client.get(url("message-list", conversation.pk)).json()["items"]
    assert [m["content"] for m in listed][-2:] == ["later", "earlier"]


@pytest.mark.parametrize(
    "created_at, code",
    [
        ("2024-01-02T12:00:00", "naive_time"),
        ("tomorrow", "invalid_time"),
        (17, "invalid_time"),
        (True, "invalid_time"),
        ("0001-01-01T00:00:00+01:00", "invalid_time"),
        ("9999-12-31T23:59:59Z", "future_time"),
    ],
)
@pytest.mark.parametrize("method", SAVES)
def test_a_created_at_that_cannot_be_stored_is_400_with_its_code(
    alice_client: Any, conversation: Any, method: str, created_at: Any, code: str
) -> None:
    before = stored(conversation)
    body = {"messages": [{"role": "user", "content": "x", "created_at": created_at}]}
    response = save(alice_client, method, conversation.pk, body)
    assert_error(response, 400, code)
    assert response.json()["details"]["field"] == "messages[0].created_at"
    assert stored(conversation) == before


def test_a_created_at_within_the_import_skew_is_accepted(alice_client: Any, conversation: Any, settings: Any) -> None:
    settings.AGENT_PERSISTENCE = {**settings.AGENT_PERSISTENCE, "IMPORT_CLOCK_SKEW": 3600}
    ahead = (timezone.now() + timedelta(minutes=30)).astimezone(dt_timezone.utc)
    body = {"messages": [{"role": "user", "content": "x", "created_at": ahead.isoformat()}]}
    response = save(alice_client, "PUT", conversation.pk, body)
    assert response.status_code == 200, response.content
    got = datetime.fromisoformat(response.json()["items"][0]["created_at"].replace("Z", "+00:00"))
    assert abs(got - ahead) < timedelta(milliseconds=1)  # the API writes milliseconds


# -- who may save ---------------------------------------------------------------------------------


@pytest.mark.parametrize("method", SAVES)
def test_another_user_s_conversation_is_404_and_unchanged(
    bob_client: Any, mallory_client: Any, conversation: Any, method: str
) -> None:
    before = stored(conversation)
    body = {"messages": [{"role": "user", "content": "taken"}], "create": True}
    for client in (bob_client, mallory_client):
        assert_error(save(client, method, conversation.pk, body), 404, "not_found")
    assert stored(conversation) == before


@pytest.mark.parametrize("method", SAVES)
def test_a_reader_of_a_shared_conversation_is_403_and_unchanged(
    alice_scope: Scope, bob_client: Any, conversation: Any, method: str
) -> None:
    conversation_store().share(alice_scope, conversation.pk)
    before = stored(conversation)
    response = save(bob_client, method, conversation.pk, {"messages": []})
    assert_error(response, 403, "conversation_not_owned")
    assert stored(conversation) == before


@pytest.mark.parametrize("method", SAVES)
def test_anonymous_saves_are_refused(anon_client: Any, conversation: Any, method: str) -> None:
    before = stored(conversation)
    assert_error(save(anon_client, method, conversation.pk, {"messages": []}), 403, "not_authenticated")
    assert stored(conversation) == before


@pytest.mark.parametrize("method", SAVES)
def test_an_id_held_by_another_conversation_is_409_and_nothing_is_written(
    alice_client: Any, alice_scope: Scope, bob_scope: Scope, conversation: Any, method: str
) -> None:
    elsewhere = conversation_store().create(bob_scope)
    taken = conversation_store().append_message(bob_scope, elsewhere.pk, role="user", content="bob's")
    before = stored(conversation)
    body = {"messages": [{"role": "user", "content": "x"}, {"id": str(taken.id), "role": "user", "content": "y"}]}
    response = save(alice_client, method, conversation.pk, body)
    assert_error(response, 409, "message_exists")
    assert response.json()["message"] == "This id is already taken; choose another."
    assert stored(conversation) == before
    assert Message.objects.get(pk=taken.id).content == "bob's"


@pytest.mark.parametrize("method", SAVES)
def test_a_run_of_another_conversation_is_404(
    alice_client: Any, alice_scope: Scope, conversation: Any, method: str
) -> None:
    from agent_persistence.stores import run_store

    other = conversation_store().create(alice_scope)
    run = run_store().create_or_resume(alice_scope, other.pk, id=uuid.uuid4(), message_id=uuid.uuid4())
    before = stored(conversation)
    body = {"messages": [{"role": "assistant", "content": "x", "run_id": str(run.id)}]}
    assert_error(save(alice_client, method, conversation.pk, body), 404, "not_found")
    assert stored(conversation) == before


# -- payload limits --------------------------------------------------------------------------------


@pytest.mark.parametrize("method", SAVES)
def test_more_messages_than_max_page_size_is_413(
    alice_client: Any, conversation: Any, settings: Any, method: str
) -> None:
    settings.AGENT_PERSISTENCE = {**settings.AGENT_PERSISTENCE, "MAX_PAGE_SIZE": 3, "DEFAULT_PAGE_SIZE": 3}
    before = stored(conversation)
    response = save(alice_client, method, conversation.pk, {"messages": [{"role": "user", "content": "x"}] * 4})
    assert_error(response, 413, "too_large")
    assert response.json()["details"] == {"field": "messages", "limit": 3}
    assert stored(conversation) == before
    assert save(alice_client, method, conversation.pk, {"messages": [{"role": "user", "content": "x"}] * 3}).status_code == 200


@pytest.mark.parametrize("method", SAVES)
def test_a_body_over_the_upload_limit_is_413(alice_client: Any, conversation: Any, settings: Any, method: str) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    before = stored(conversation)
    response = save(alice_client, method, conversation.pk, {"messages": [{"role": "user", "content": "x" * 2000}]})
    assert_error(response, 413, "too_large")
    assert stored(conversation) == before


@pytest.mark.parametrize("method", SAVES)
def test_a_message_over_max_message_bytes_is_413(
    alice_client: Any, conversation: Any, settings: Any, method: str
) -> None:
    settings.AGENT_PERSISTENCE = {**settings.AGENT_PERSISTENCE, "MAX_MESSAGE_BYTES": 100}
    before = stored(conversation)
    body = {"messages": [{"role": "user", "content": "ok"}, {"role": "user", "content": "x" * 200}]}
    assert_error(save(alice_client, method, conversation.pk, body), 413, "too_large")
    assert stored(conversation) == before


# -- hostile bodies -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body, code",
    [
        ({"messages": "not a list"}, "invalid"),
        ({"messages": [["role", "user"]]}, "invalid"),
        ({"messages": [{"content": "no role"}]}, "invalid"),
        ({"messages": [{"role": "wizard", "content": "x"}]}, "invalid"),
        ({"messages": [{"role": "user", "content": "x", "colour": "red"}]}, "unknown_field"),
        ({"messages": [], "colour": "red"}, "unknown_field"),
        ({"messages": [{"id": "not-a-uuid", "role": "user", "content": "x"}]}, "invalid"),
        ({"messages": [{"role": "user", "content": "x", "position": 7}]}, "unknown_field"),
        ({"messages": [{"role": "user", "content": "x", "name": 5}]}, "invalid"),
        ({"messages": [{"role": "user", "content": "x", "metadata": []}]}, "invalid"),
        ({"messages": [{"role": "user", "content": "x"}], "create": "yes"}, "invalid"),
        ({}, "invalid"),
        ([], "invalid"),
        ("messages", "invalid"),
        (None, "invalid"),
    ],
)
@pytest.mark.parametrize("method", SAVES)
def test_malformed_bodies_are_400_and_write_nothing(
    alice_client: Any, conversation: Any, method: str, body: Any, code: str
) -> None:
    before = stored(conversation)
    assert_error(save(alice_client, method, conversation.pk, body), 400, code)
    assert stored(conversation) == before


@pytest.mark.parametrize("method", SAVES)
def test_a_repeated_id_is_400_and_writes_nothing(alice_client: Any, conversation: Any, method: str) -> None:
    u1 = ids_of(conversation)[0]
    before = stored(conversation)
    body = {"messages": [{"id": u1, "role": "user", "content": "a"}, {"id": u1.upper(), "role": "user", "content": "b"}]}
    assert_error(save(alice_client, method, conversation.pk, body), 400, "invalid")
    assert stored(conversation) == before


def raw_bodies(value: bytes) -> list[bytes]:
    return [
        b'{"messages": [{"role": "user", "content": ' + value + b"}]}",
        b'{"messages": [{"role": "user", "content": "ok", "metadata": {' + value + b": 1}}]}",
        b'{"messages": [{"role": "user", "content": "ok", "name": ' + value + b"}]}",
        b'{"messages": [{"role": "user", "content": "ok", "created_at": ' + value + b"}]}",
        b'{"messages": [], "agent": ' + value + b', "create": true}',
    ]


@pytest.mark.parametrize("value", HOSTILE_STRINGS, ids=["surrogate", "low-surrogate", "nul"])
@pytest.mark.parametrize("method", SAVES)
def test_lone_surrogates_and_nul_are_400_invalid(alice_client: Any, conversation: Any, method: str, value: bytes) -> None:
    before = stored(conversation)
    for body in raw_bodies(value):
        response = alice_client.generic(method, url("message-list", conversation.pk), body, content_type="application/json")
        assert_error(response, 400, "invalid")
    assert stored(conversation) == before


@pytest.mark.parametrize(
    "body, code",
    [
        (DEEP_1K, "malformed_request"),
        (DEEP_100K, "malformed_request"),
        (b'{"messages": [{"role": "user", "content": ' + b"[" * 200 + b"]" * 200 + b"}]}", "malformed_request"),
        (b'{"messages": [{"role": "user", "content": 9223372036854775808}]}', "invalid"),
        (b'{"messages": [{"role": "user", "content": 1e999}]}', "invalid"),
        (b'{"messages": [{"role": "user", "content": NaN}]}', "invalid"),
        (b'{"messages": [{"role": "user", "content": "x"}', "malformed_request"),
        (b"\xff\xfe{}", "malformed_request"),
    ],
    ids=["1k-deep", "100k-deep", "deep-content", "huge-int", "huge-float", "nan", "truncated", "not-utf8"],
)
@pytest.mark.parametrize("method", SAVES)
def test_deep_json_huge_numbers_and_broken_text_are_400(
    alice_client: Any, conversation: Any, method: str, body: bytes, code: str
) -> None:
    before = stored(conversation)
    response = alice_client.generic(method, url("message-list", conversation.pk), body, content_type="application/json")
    assert_error(response, 400, code)
    assert stored(conversation) == before


@pytest.mark.parametrize(
    "content_type, body",
    [
        ("application/x-www-form-urlencoded", b"messages=x"),
        ("text/plain", b'{"messages": []}'),
        ("multipart/form-data; boundary=B", b'--B\r\nContent-Disposition: form-data; name="messages"\r\n\r\nx\r\n--B--\r\n'),
        ("application/xml", b"<messages/>"),
    ],
    ids=["form", "text", "multipart", "xml"],
)
@pytest.mark.parametrize("method", SAVES)
def test_bodies_that_are_not_json_are_415(
    alice_client: Any, conversation: Any, method: str, content_type: str, body: bytes
) -> None:
    before = stored(conversation)
    response = alice_client.generic(method, url("message-list", conversation.pk), body, content_type=content_type)
    assert_error(response, 415, "unsupported_media_type")
    assert stored(conversation) == before


@pytest.mark.parametrize("hostile", ["not-a-uuid", "%00", "a%00b", "%ED%A0%80", "%F0%9F%98%80", "x" * 300])
@pytest.mark.parametrize("method", SAVES)
def test_a_hostile_conversation_id_is_404_or_with_create_400_invalid_id(
    alice_client: Any, method: str, hostile: str
) -> None:
    path = f"/api/conversations/{hostile}/messages/"
    response = alice_client.generic(method, path, b'{"messages": []}', content_type="application/json")
    assert_error(response, 404, "not_found")
    response = alice_client.generic(method, path, b'{"messages": [], "create": true}', content_type="application/json")
    assert_error(response, 400, "invalid_id")
    assert Conversation.objects.count() == 0


# -- the schema ----------------------------------------------------------------------------------------


def test_the_schema_documents_both_saves(alice_client: Any) -> None:
    schema = alice_client.get(url("schema"), HTTP_ACCEPT="application/json").json()
    operations = schema["paths"]["/conversations/{conversation_id}/messages/"]
    assert operations["put"]["operationId"] == "messages_replace"
    assert operations["patch"]["operationId"] == "messages_merge"
    for method in ("put", "patch"):
        body = operations[method]["requestBody"]["content"]["application/json"]["schema"]
        assert body == {"$ref": "#/components/schemas/TranscriptSaveInputRequest"}
        assert set(operations[method]["responses"]) >= {"200", "400", "403", "404", "409", "413", "415"}
    message = schema["components"]["schemas"]["TranscriptMessageInputRequest"]
    assert message["properties"]["created_at"]["format"] == "date-time"
    assert message.get("additionalProperties") is False
