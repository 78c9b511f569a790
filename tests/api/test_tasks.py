"""The task endpoints: list and create, read, change, delete, comments and the result."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from agent_persistence.models import Task
from agent_persistence.stores import conversation_store, task_store

pytestmark = pytest.mark.django_db


def url(name: str, *args: Any) -> str:
    return reverse(f"agent_persistence:{name}", args=args)


@pytest.fixture
def task(alice_scope: Any) -> Any:
    return task_store().create(alice_scope, title="Crawl")


def test_create_is_201(alice_client: Any, alice_scope: Any) -> None:
    conversation = conversation_store().create(alice_scope)
    response = alice_client.post(
        url("task-list"),
        {"title": "Crawl", "description": "docs", "conversation_id": str(conversation.pk), "agent": "crawler",
         "status": "running", "callback_url": "https://hooks.example.com/t", "metadata": {"a": 1}},
        format="json",
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["title"] == "Crawl" and body["status"] == "running" and body["conversation_id"] == str(conversation.pk)
    assert body["comments"] == [] and body["result"] is None


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({}, "invalid"),
        ({"title": 5}, "invalid"),
        ({"title": "   "}, "invalid"),
        ({"title": "t", "status": "done"}, "invalid"),
        ({"title": "t", "callback_url": "ftp://x"}, "invalid"),
        ({"title": "t", "conversation_id": "nope"}, "invalid"),
        ({"title": "t", "owner": "bob"}, "unknown_field"),
    ],
)
def test_create_with_bad_input_is_400_and_writes_nothing(alice_client: Any, body: dict[str, Any], code: str) -> None:
    response = alice_client.post(url("task-list"), body, format="json")
    assert response.status_code == 400
    assert response.json()["code"] == code
    assert Task.objects.count() == 0


def test_create_in_a_conversation_of_someone_else(bob_client: Any, alice_scope: Any) -> None:
    hidden = conversation_store().create(alice_scope)
    shared = conversation_store().create(alice_scope, shared=True)
    assert bob_client.post(url("task-list"), {"title": "t", "conversation_id": str(hidden.pk)}, format="json").status_code == 404
    response = bob_client.post(url("task-list"), {"title": "t", "conversation_id": str(shared.pk)}, format="json")
    assert response.status_code == 403 and response.json()["code"] == "conversation_not_owned"
    assert Task.objects.count() == 0


def test_list_with_filters_and_paging(alice_client: Any, alice_scope: Any, bob_scope: Any) -> None:
    conversation = conversation_store().create(alice_scope)
    first = task_store().create(alice_scope, title="a")
    second = task_store().create(alice_scope, title="b", conversation_id=conversation.pk, status="running")
    task_store().create(bob_scope, title="bob's")
    body = alice_client.get(url("task-list")).json()
    assert [t["id"] for t in body["items"]] == [str(second.pk), str(first.pk)] and body["total"] == 2
    body = alice_client.get(url("task-list"), {"status": "running"}).json()
    assert [t["id"] for t in body["items"]] == [str(second.pk)]
    body = alice_client.get(url("task-list"), {"conversation_id": str(conversation.pk)}).json()
    assert [t["id"] for t in body["items"]] == [str(second.pk)]
    body = alice_client.get(url("task-list"), {"order": "asc", "limit": 1}).json()
    assert [t["id"] for t in body["items"]] == [str(first.pk)] and body["has_more"] is True
    for query in ({"status": "done"}, {"conversation_id": "nope"}, {"limit": "x"}, {"order": "up"}):
        assert alice_client.get(url("task-list"), query).status_code == 400


def test_list_tasks_by_cursor(alice_client: Any, bob_client: Any, alice_scope: Any, bob_scope: Any) -> None:
    """``before`` / ``after`` a task id: strict, uncounted unless asked; a cursor that is not a task of the caller is 404."""
    created = [str(task_store().create(alice_scope, title=f"t{i}").pk) for i in range(4)]
    response = alice_client.get(url("task-list"), {"before": created[3], "limit": 2})
    assert response.status_code == 200
    body = response.json()
    assert ([t["id"] for t in body["items"]], body["total"], body["has_more"]) == ([created[2], created[1]], None, True)
    body = alice_client.get(url("task-list"), {"after": created[0], "order": "asc", "total": "true"}).json()
    assert ([t["id"] for t in body["items"]], body["total"], body["has_more"]) == (created[1:], 3, False)
    bobs = str(task_store().create(bob_scope, title="bob's").pk)
    for cursor in (bobs, "01900000-0000-7000-8000-000000000001", "nope", "1"):
        for direction in ("before", "after"):
            response = alice_client.get(url("task-list"), {direction: cursor})
            assert (response.status_code, response.json()["code"]) == (404, "not_found"), (direction, cursor)
    assert bob_client.get(url("task-list"), {"before": created[3]}).status_code == 404
    conversation = conversation_store().create(alice_scope)
    inside = str(task_store().create(alice_scope, title="inside", conversation_id=conversation.pk).pk)
    assert alice_client.get(url("task-list"), {"conversation_id": str(conversation.pk), "before": created[0]}).status_code == 404
    body = alice_client.get(url("task-list"), {"conversation_id": str(conversation.pk), "after": inside}).json()
    assert (body["items"], body["has_more"]) == ([], False)


def test_read_update_delete(alice_client: Any, task: Any) -> None:
    assert alice_client.get(url("task-detail", task.pk)).json()["title"] == "Crawl"
    response = alice_client.patch(url("task-detail", task.pk), {"status": "failed", "error": {"why": "x"}}, format="json")
    assert response.status_code == 200
    assert response.json()["status"] == "failed" and response.json()["error"] == {"why": "x"}
    response = alice_client.patch(url("task-detail", task.pk), {"result": 1}, format="json")
    assert response.status_code == 400 and response.json()["code"] == "unknown_field"
    response = alice_client.patch(url("task-detail", task.pk), {"status": "done"}, format="json")
    assert response.status_code == 400 and response.json()["code"] == "invalid"
    assert alice_client.delete(url("task-detail", task.pk)).status_code == 204
    assert alice_client.get(url("task-detail", task.pk)).status_code == 404
    assert alice_client.delete(url("task-detail", task.pk)).status_code == 404


def test_comments(alice_client: Any, task: Any) -> None:
    response = alice_client.post(url("task-comments", task.pk), {"text": "page 3", "author": "crawler"}, format="json")
    assert response.status_code == 201
    (comment,) = response.json()["comments"]
    assert comment["text"] == "page 3" and comment["author"] == "crawler"
    response = alice_client.post(url("task-comments", task.pk), {"author": "x"}, format="json")
    assert response.status_code == 400 and response.json()["code"] == "invalid"
    response = alice_client.post(url("task-comments", task.pk), {"text": "x", "at": 1}, format="json")
    assert response.status_code == 400 and response.json()["code"] == "unknown_field"


def test_result(alice_client: Any, task: Any) -> None:
    assert alice_client.get(url("task-result", task.pk)).json() == {"result": None, "result_at": None}
    response = alice_client.put(url("task-result", task.pk), {"result": {"pages": 10}}, format="json")
    assert response.status_code == 200
    assert response.json()["result"] == {"pages": 10} and response.json()["result_at"]
    assert alice_client.get(url("task-result", task.pk)).json()["result"] == {"pages": 10}
    response = alice_client.put(url("task-result", task.pk), {}, format="json")
    assert response.status_code == 400 and response.json()["code"] == "invalid"
    response = alice_client.put(url("task-result", task.pk), {"result": None}, format="json")
    assert response.json() == {"result": None, "result_at": None}


def test_result_over_max_state_bytes_is_413(alice_client: Any, task: Any, settings: Any) -> None:
    settings.AGENT_PERSISTENCE = {**settings.AGENT_PERSISTENCE, "MAX_STATE_BYTES": 50}
    response = alice_client.put(url("task-result", task.pk), {"result": "x" * 100}, format="json")
    assert response.status_code == 413 and response.json()["code"] == "too_large"


@pytest.mark.parametrize("task_id", ["nope", "01900000-0000-7000-8000-000000000001"])
def test_bad_or_unknown_task_ids_are_404(alice_client: Any, task_id: str) -> None:
    for response in (
        alice_client.get(url("task-detail", task_id)),
        alice_client.patch(url("task-detail", task_id), {}, format="json"),
        alice_client.delete(url("task-detail", task_id)),
        alice_client.post(url("task-comments", task_id), {"text": "x"}, format="json"),
        alice_client.get(url("task-result", task_id)),
        alice_client.put(url("task-result", task_id), {"result": 1}, format="json"),
    ):
        assert response.status_code == 404
        assert response.json()["code"] == "not_found"


# -- the authorization matrix: tasks are private to their (tenant, owner) ------------------------

ENDPOINTS: list[tuple[str, str, Any, Any]] = [
    ("list", "get", lambda t: url("task-list"), None),
    ("create", "post", lambda t: url("task-list"), {"title": "t"}),
    ("read", "get", lambda t: url("task-detail", t), None),
    ("update", "patch", lambda t: url("task-detail", t), {"status": "running"}),
    ("delete", "delete", lambda t: url("task-detail", t), None),
    ("comment", "post", lambda t: url("task-comments", t), {"text": "x"}),
    ("result", "get", lambda t: url("task-result", t), None),
    ("set result", "put", lambda t: url("task-result", t), {"result": 1}),
]
# owner, other user of the tenant, reader of the shared conversation the task is in, other tenant, anonymous
EXPECTED = {
    "list": (200, 200, 200, 200, 403),
    "create": (201, 201, 201, 201, 403),
    "read": (200, 404, 404, 404, 403),
    "update": (200, 404, 404, 404, 403),
    "delete": (204, 404, 404, 404, 403),
    "comment": (201, 404, 404, 404, 403),
    "result": (200, 404, 404, 404, 403),
    "set result": (200, 404, 404, 404, 403),
}
ACTORS = ["owner", "tenant user", "shared reader", "other tenant", "anonymous"]


@pytest.mark.parametrize("actor", ACTORS)
@pytest.mark.parametrize(("name", "method", "path", "body"), ENDPOINTS, ids=[e[0] for e in ENDPOINTS])
def test_authorization_matrix(
    name: str, method: str, path: Any, body: Any, actor: str,
    alice_user: Any, bob_user: Any, mallory_user: Any, alice_scope: Any, client_for: Any,
) -> None:
    conversation = conversation_store().create(alice_scope, shared=actor == "shared reader")
    task = task_store().create(alice_scope, title="Crawl", conversation_id=conversation.pk)
    user = {"owner": alice_user, "tenant user": bob_user, "shared reader": bob_user,
            "other tenant": mallory_user, "anonymous": None}[actor]
    response = getattr(client_for(user), method)(path(task.pk), body, format="json")
    expected = EXPECTED[name][ACTORS.index(actor)]
    assert response.status_code == expected
    if expected >= 400:
        assert set(response.json()) >= {"code", "message"}
        stored = Task.objects.get(pk=task.pk)
        assert (stored.status, stored.comments, stored.result, Task.objects.count()) == ("pending", [], None, 1)
    if name == "list" and actor not in ("owner", "anonymous"):
        assert response.json()["total"] == 0
