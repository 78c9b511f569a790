"""Hostile input to the REST API: every case is a 4xx with the app's JSON error body, never a 5xx, and writes nothing.

The bodies are sent as raw bytes, the way an attacker's client would send
them: escaped lone surrogates (``"\\ud800"``), NUL (``"\\u0000"``), JSON nested
1,000 and 100,000 deep, numbers out of range, other content types. After the
refused writes the owner's listings still answer (on SQLite a committed lone
surrogate used to make them 500 for good). Query parameters too large for a
64-bit ``OFFSET`` and path parameters holding NUL are 400 / 404; an id cursor
holding anything but a row's id is 404.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from agent_persistence.models import Conversation, Message, Task
from agent_persistence.scope import Scope
from agent_persistence.stores import conversation_store, file_store, task_store

pytestmark = pytest.mark.django_db

NS = "agent_persistence"
DEEP_1K = b"[" * 1_000 + b"]" * 1_000
DEEP_100K = b'{"metadata":' + b"[" * 100_000 + b"]" * 100_000 + b"}"


def url(name: str, *args: Any) -> str:
    return reverse(f"{NS}:{name}", args=args)


@pytest.fixture
def rows(alice_scope: Scope) -> dict[str, str]:
    """Alice's conversation (with a message and a file), her task."""
    import io

    conversation = conversation_store().create(alice_scope, agent="echo", title="Mine")
    message = conversation_store().append_message(alice_scope, conversation.pk, role="user", content="hello")
    file_store().save(alice_scope, conversation_id=conversation.pk, content=io.BytesIO(b"x"), name="a.txt")
    task = task_store().create(alice_scope, title="A task", conversation_id=conversation.pk)
    return {"conversation": str(conversation.pk), "message": str(message.pk), "task": str(task.pk)}


def row_counts() -> tuple[int, int, int]:
    return Conversation.objects.count(), Message.objects.count(), Task.objects.count()


def json_endpoints(rows: dict[str, str]) -> list[tuple[str, str]]:
    """(method, url) of every endpoint that reads a JSON body."""
    c, m, t = rows["conversation"], rows["message"], rows["task"]
    return [
        ("POST", url("conversation-list")),
        ("PATCH", url("conversation-detail", c)),
        ("POST", url("message-list", c)),
        ("PATCH", url("message-detail", c, m)),
        ("POST", url("turn-start", c)),
        ("POST", url("turn-resume", c)),
        ("POST", url("turn-cancel", c)),
        ("POST", url("conversation-interrupts", c)),
        ("POST", url("task-list")),
        ("PATCH", url("task-detail", t)),
        ("POST", url("task-comments", t)),
        ("PUT", url("task-result", t)),
        ("POST", url("mcp-authorize", "docs")),
    ]


def assert_owner_reads_still_work(client: Any, rows: dict[str, str]) -> None:
    c = rows["conversation"]
    for path in (url("conversation-list"), url("conversation-detail", c), url("message-list", c), url("task-list")):
        response = client.get(path)
        assert response.status_code == 200, (path, response.content[:300])


def assert_error(response: Any, status: int, code: str) -> None:
    assert response.status_code == status, response.content[:500]
    assert response["Content-Type"].startswith("application/json")
    assert response.json()["code"] == code, response.json()


# -- lone surrogates and NUL in the values that are stored -------------------------------------

HOSTILE_STRINGS = [b'"\\ud800"', b'"\\udfff tail"', b'"a\\u0000b"']


def hostile_writes(rows: dict[str, str], value: bytes) -> list[tuple[str, str, bytes]]:
    """The eight fields of issue 10 (and an object key), each given ``value``."""
    c, m, t = rows["conversation"], rows["message"], rows["task"]
    return [
        ("POST", url("message-list", c), b'{"role": "user", "content": ' + value + b"}"),
        ("POST", url("message-list", c), b'{"role": "user", "content": "ok", "metadata": {"k": ' + value + b"}}"),
        ("PATCH", url("message-detail", c, m), b'{"content": ' + value + b"}"),
        ("PATCH", url("message-detail", c, m), b'{"metadata": {"k": ' + value + b"}}"),
        ("POST", url("conversation-list"), b'{"metadata": {"k": ' + value + b"}}"),
        ("POST", url("conversation-list"), b'{"state": {"k": [' + value + b"]}}"),
        ("PATCH", url("conversation-detail", c), b'{"metadata": {' + value + b": 1}}"),
        ("PATCH", url("conversation-detail", c), b'{"state": {"k": ' + value + b"}}"),
        ("POST", url("task-list"), b'{"title": "t", "metadata": {"k": ' + value + b"}}"),
        ("PATCH", url("task-detail", t), b'{"metadata": {"k": ' + value + b"}}"),
        ("POST", url("turn-start", c), b'{"content": "hi", "agent": "echo", "metadata": {"k": ' + value + b"}}"),
        ("POST", url("turn-start", c), b'{"content": ' + value + b', "agent": "echo"}'),
        ("POST", url("conversation-list"), b'{"title": ' + value + b"}"),
    ]


@pytest.mark.parametrize("value", HOSTILE_STRINGS, ids=["surrogate", "low-surrogate", "nul"])
def test_lone_surrogates_and_nul_are_400_invalid_and_write_nothing(
    alice_client: Any, rows: dict[str, str], value: bytes
) -> None:
    before = row_counts()
    versions = Conversation.objects.get(pk=rows["conversation"]).version
    for method, path, body in hostile_writes(rows, value):
        response = alice_client.generic(method, path, body, content_type="application/json")
        assert_error(response, 400, "invalid")
        assert response.json()["details"]["field"] == "body"
    assert row_counts() == before
    assert Conversation.objects.get(pk=rows["conversation"]).version == versions
    assert Message.objects.get(pk=rows["message"]).content == "hello"
    assert_owner_reads_still_work(alice_client, rows)


def test_an_escaped_surrogate_pair_is_one_character_and_is_stored(alice_client: Any, rows: dict[str, str]) -> None:
    body = b'{"role": "user", "content": "\\ud83d\\ude00"}'
    response = alice_client.generic("POST", url("message-list", rows["conversation"]), body, content_type="application/json")
    assert response.status_code == 201, response.content
    assert response.json()["content"] == "\U0001f600"


# -- nesting, numbers, text that is not JSON -----------------------------------------------------


@pytest.mark.parametrize("body", [DEEP_1K, DEEP_100K], ids=["1k-deep", "100k-deep"])
def test_deep_json_is_400_malformed_request_on_every_json_endpoint(
    alice_client: Any, rows: dict[str, str], body: bytes
) -> None:
    before = row_counts()
    for method, path in json_endpoints(rows):
        response = alice_client.generic(method, path, body, content_type="application/json")
        assert_error(response, 400, "malformed_request")
    assert row_counts() == before
    assert_owner_reads_still_work(alice_client, rows)


@pytest.mark.parametrize(
    "number", [b"9223372036854775808", b"-9223372036854775809", b"1" * 5000, b"1e999", b"NaN", b"-Infinity"]
)
def test_numbers_out_of_range_are_400_invalid(alice_client: Any, rows: dict[str, str], number: bytes) -> None:
    before = row_counts()
    for method, path, body in [
        ("POST", url("conversation-list"), b'{"metadata": {"n": ' + number + b"}}"),
        ("PATCH", url("conversation-detail", rows["conversation"]), b'{"state": {"n": ' + number + b"}}"),
        ("POST", url("message-list", rows["conversation"]), b'{"role": "user", "content": [' + number + b"]}"),
        ("PUT", url("task-result", rows["task"]), b'{"result": ' + number + b"}"),
    ]:
        assert_error(alice_client.generic(method, path, body, content_type="application/json"), 400, "invalid")
    assert row_counts() == before


def test_the_largest_64_bit_integers_are_stored(alice_client: Any) -> None:
    body = b'{"metadata": {"max": 9223372036854775807, "min": -9223372036854775808}}'
    response = alice_client.generic("POST", url("conversation-list"), body, content_type="application/json")
    assert response.status_code == 201, response.content
    assert response.json()["metadata"] == {"max": 2**63 - 1, "min": -(2**63)}


@pytest.mark.parametrize("body", [b"{", b"{'a': 1}", b"\xff\xfe{}", b"[1,]"])
def test_text_that_is_not_json_is_400_malformed_request(alice_client: Any, rows: dict[str, str], body: bytes) -> None:
    for method, path in json_endpoints(rows):
        assert_error(alice_client.generic(method, path, body, content_type="application/json"), 400, "malformed_request")


# -- content types ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content_type, body",
    [
        ("application/x-www-form-urlencoded", b"title=form&agent=echo"),
        ("text/plain", b'{"title": "plain"}'),
        ("multipart/form-data; boundary=B", b'--B\r\nContent-Disposition: form-data; name="title"\r\n\r\nx\r\n--B--\r\n'),
        ("multipart/form-data; boundary=B", b"--B--\r\n"),
        ("application/xml", b"<title>x</title>"),
    ],
    ids=["form", "text", "multipart", "empty-multipart", "xml"],
)
def test_bodies_that_are_not_json_are_415_and_write_nothing(
    alice_client: Any, rows: dict[str, str], content_type: str, body: bytes
) -> None:
    before = row_counts()
    for method, path in json_endpoints(rows):
        response = alice_client.generic(method, path, body, content_type=content_type)
        assert_error(response, 415, "unsupported_media_type")
    assert row_counts() == before
    assert Conversation.objects.get(pk=rows["conversation"]).title == "Mine"


def test_file_upload_takes_multipart_only(alice_client: Any, rows: dict[str, str]) -> None:
    path = url("file-list", rows["conversation"])
    assert_error(alice_client.generic("POST", path, b'{"file": "x"}', content_type="application/json"), 415, "unsupported_media_type")
    assert_error(alice_client.generic("POST", path, b"file=x", content_type="application/x-www-form-urlencoded"), 415, "unsupported_media_type")
    # Only the closing boundary: a JSON 400, never an empty body.
    response = alice_client.generic("POST", path, b"--B--\r\n", content_type="multipart/form-data; boundary=B")
    assert response.status_code == 400
    assert response.json()["code"] in ("invalid", "malformed_request")
    response = alice_client.generic("POST", path, b"garbage without a boundary", content_type="multipart/form-data")
    assert response.status_code == 400
    assert response.json()["code"] == "malformed_request"


# -- query and path parameters ------------------------------------------------------------------


def listings(rows: dict[str, str]) -> list[str]:
    c = rows["conversation"]
    return [
        url("conversation-list"),
        url("conversation-detail", c),
        url("message-list", c),
        url("file-list", c),
        url("conversation-runs", c),
        url("task-list"),
    ]


@pytest.mark.parametrize(
    "query",
    [
        "offset=9223372036854775808",
        "offset=99999999999999999999999999999999",
        "offset=" + "9" * 5000,
        "offset=-1",
        "offset=-9223372036854775809",
        "limit=9223372036854775808",
        "limit=-1",
        "limit=0",
        "offset=1e3",
        "offset=%00",
        "offset= 1",
    ],
)
def test_huge_negative_or_malformed_paging_is_400_on_every_listing(
    alice_client: Any, rows: dict[str, str], query: str
) -> None:
    for path in listings(rows):
        response = alice_client.get(f"{path}?{query}")
        assert response.status_code == 400, (path, query, response.content[:300])
        assert response.json()["code"] in ("invalid", "invalid_parameter")


def test_the_largest_offset_is_an_empty_page_on_every_listing(alice_client: Any, rows: dict[str, str]) -> None:
    for path in listings(rows):
        response = alice_client.get(f"{path}?offset=9223372036854775807")
        assert response.status_code == 200, (path, response.content[:300])
        page = response.json().get("messages", response.json())
        assert page["items"] == [] and page["has_more"] is False and page["offset"] == 2**63 - 1


@pytest.mark.parametrize(
    "query", ["after=9223372036854775808", "before=-1", "after=-5", "limit=9223372036854775808", "after=%00", "types=%00"]
)
def test_huge_or_hostile_event_cursors_are_400(alice_client: Any, rows: dict[str, str], query: str) -> None:
    response = alice_client.get(f"{url('event-list', rows['conversation'])}?{query}")
    assert response.status_code == 400, response.content
    assert response.json()["code"] in ("invalid", "invalid_parameter")


def test_the_largest_event_cursor_is_an_empty_page(alice_client: Any, rows: dict[str, str]) -> None:
    response = alice_client.get(f"{url('event-list', rows['conversation'])}?after=9223372036854775807")
    assert response.status_code == 200
    assert response.json()["events"] == []


def id_cursor_listings(rows: dict[str, str]) -> list[str]:
    """The listings that page by ``before`` / ``after`` an id: messages, runs, files, tasks."""
    c = rows["conversation"]
    return [url("conversation-detail", c), url("message-list", c), url("conversation-runs", c), url("file-list", c), url("task-list")]


@pytest.mark.parametrize(
    "hostile",
    ["%00", "a%00b", "01900000-0000-7000-8000-000000000001%00", "%ED%A0%80", "%5Cud800", "%F0%9F%98%80", "%20",
     "x" * 10_000, "9" * 5_000, "{01900000-0000-7000-8000-000000000001}"],
    ids=["nul", "inner-nul", "uuid-nul", "surrogate", "escaped-surrogate", "emoji", "space", "10k", "5k-digits", "braces"],
)
def test_hostile_id_cursors_are_404_not_found_on_every_cursor_listing(
    alice_client: Any, rows: dict[str, str], hostile: str
) -> None:
    """Whatever text a cursor holds, it names no row: the JSON 404 a message cursor gets, never a 500."""
    for path in id_cursor_listings(rows):
        for direction in ("before", "after"):
            response = alice_client.get(f"{path}?{direction}={hostile}")
            assert_error(response, 404, "not_found")
    assert_owner_reads_still_work(alice_client, rows)


@pytest.mark.parametrize("query", ["agent=%00", "order=%00", "status=%00", "conversation_id=%00", "message_id=%00",
                                   "action_due_before=%00", "before=%00", "after=%00", "pinned_first=%00"])
def test_nul_in_query_parameters_is_400_or_404(alice_client: Any, rows: dict[str, str], query: str) -> None:
    for path in listings(rows):
        response = alice_client.get(f"{path}?{query}")
        assert response.status_code in (200, 400, 404), (path, query, response.content[:300])
        assert response["Content-Type"].startswith("application/json")


@pytest.mark.parametrize("hostile", ["%00", "a%00b", "%ED%A0%80", "%F0%9F%98%80", "x" * 300])
def test_nul_and_surrogates_in_path_parameters_are_404_never_500(
    alice_client: Any, rows: dict[str, str], hostile: str
) -> None:
    c = rows["conversation"]
    for method, path in [
        ("DELETE", f"/api/mcp/integrations/{hostile}/"),
        ("POST", f"/api/mcp/integrations/{hostile}/authorize/"),
        ("GET", f"/api/conversations/{hostile}/"),
        ("DELETE", f"/api/conversations/{hostile}/"),
        ("GET", f"/api/conversations/{c}/messages/{hostile}/"),
        ("DELETE", f"/api/conversations/{c}/messages/{hostile}/"),
        ("GET", f"/api/files/{hostile}/"),
        ("GET", f"/api/tasks/{hostile}/"),
        ("GET", f"/api/runs/{hostile}/"),
        ("GET", f"/api/conversations/{hostile}/stream/"),
        ("GET", f"/api/conversations/{hostile}/events/"),
    ]:
        response = alice_client.generic(method, path)
        assert response.status_code in (404, 405), (method, path, response.status_code, response.content[:300])
        if response.status_code == 404:
            code = response.json()["code"]
            assert code.endswith("not_found") or code == "unknown_server", code


# -- over a real ASGI server ---------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_on_a_live_server_hostile_bodies_get_json_errors_never_an_empty_body(alice_user: Any) -> None:
    """Under uvicorn: an empty multipart body, a 100,000-deep body, a lone surrogate and a form body
    each get the app's JSON error, and the owner's listings answer afterwards."""
    import httpx

    from .live import live_server

    alice_user.set_password("alice-password")
    alice_user.save()
    with live_server() as base_url, httpx.Client(base_url=f"{base_url}/api", auth=("alice", "alice-password"), timeout=30) as api:
        conversation = api.post("/conversations/", json={"title": "Mine"}).json()["id"]
        empty_multipart = {"Content-Type": "multipart/form-data; boundary=B"}
        cases = [
            ("/conversations/", b"--B--\r\n", empty_multipart, 415, "unsupported_media_type"),
            (f"/conversations/{conversation}/files/", b"--B--\r\n", empty_multipart, 400, None),
            (f"/conversations/{conversation}/files/", b"no boundary here", {"Content-Type": "multipart/form-data"}, 400, "malformed_request"),
            ("/conversations/", DEEP_100K, {"Content-Type": "application/json"}, 400, "malformed_request"),
            (f"/conversations/{conversation}/messages/", b'{"role": "user", "content": "\\ud800"}', {"Content-Type": "application/json"}, 400, "invalid"),
            ("/tasks/", b"title=form", {"Content-Type": "application/x-www-form-urlencoded"}, 415, "unsupported_media_type"),
        ]
        for path, body, headers, status, code in cases:
            response = api.post(path, content=body, headers=headers)
            assert response.status_code == status, (path, response.status_code, response.text[:300])
            assert response.headers["content-type"].startswith("application/json"), (path, response.headers)
            assert response.json()["code"] == (code or response.json()["code"]) and response.json()["message"]
        for path in ("/conversations/", f"/conversations/{conversation}/", f"/conversations/{conversation}/messages/"):
            assert api.get(path).status_code == 200
        assert api.get("/files/?offset=1", ).status_code in (404, 405)
        assert api.get(f"/conversations/{conversation}/files/?offset=9223372036854775808").status_code == 400
