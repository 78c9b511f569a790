"""What a page costs: queries constant in the page size, one-pass bodies equal to the serializers', totals on demand.

Every list endpoint is read at page sizes 5 and 50 (the interrupt list, which
has no page, with 5 and 50 interrupts) and must run the same number of
queries: a query per row (N+1) fails it. The bodies are built by
:func:`~agent_persistence.api.serializers.base.representation`, checked here to
equal what each serializer's ``.data`` gives. On PostgreSQL the statement of a
cursor page is explained on a table large enough for the planner to care, and
must read the ``(conversation, position)`` index (events: ``(conversation, seq)``).
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any, Callable

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from agent_persistence.api.serializers.base import representation
from agent_persistence.api.serializers.conversations import ConversationSerializer, EventSerializer, MessageSerializer
from agent_persistence.api.serializers.files import FileSerializer
from agent_persistence.api.serializers.tasks import TaskResultSerializer, TaskSerializer
from agent_persistence.api.serializers.turns import InterruptSerializer, RunSerializer
from agent_persistence.ids import uuid7
from agent_persistence.models import Message, Run, StoredFile, Task
from agent_persistence.scope import Scope
from agent_persistence.stores import (
    conversation_store,
    event_store,
    file_store,
    interrupt_store,
    run_store,
    task_store,
)

pytestmark = pytest.mark.django_db

NS = "agent_persistence"
ROWS = 60


def url(name: str, *args: Any) -> str:
    return reverse(f"{NS}:{name}", args=args)


def fill(scope: Scope, rows: int) -> dict[str, Any]:
    """A conversation of ``rows`` messages, events, runs, files and tasks, with ``rows`` pending interrupts on one run."""
    conversations = conversation_store()
    for number in range(rows):
        conversations.create(scope, agent="echo", title=f"Other {number}")
    conversation = conversations.create(scope, agent="echo", title="Full")
    messages = conversations.merge_messages(
        scope, conversation.pk, [{"role": "user", "content": f"m{n}", "metadata": {"n": n}} for n in range(rows)]
    )
    event_store().append(scope, conversation.pk, [{"type": "note", "data": {"n": n}} for n in range(rows)])
    runs = [
        run_store().create_or_resume(scope, conversation.pk, id=uuid.uuid4(), message_id=messages[0].id, name=f"r{n}")
        for n in range(rows)
    ]
    files, tasks = [], []
    for n in range(rows):
        interrupt_store().create(scope, conversation.pk, id=uuid.uuid4(), run_id=runs[0].id, kind="generic", payload={"n": n})
        files.append(file_store().save(scope, conversation_id=conversation.pk, content=b"x", name=f"f{n}.txt"))
        tasks.append(task_store().create(scope, title=f"t{n}", conversation_id=conversation.pk))
    # In listing order: runs newest first, files oldest first, tasks newest first.
    runs = run_store().list(scope, conversation.pk, limit=rows).items
    return {"conversation": conversation, "messages": messages, "runs": runs, "files": files, "tasks": tasks[::-1]}


@pytest.fixture
def full(alice_scope: Scope) -> dict[str, Any]:
    return fill(alice_scope, ROWS)


def list_requests(full: dict[str, Any]) -> dict[str, Callable[[int], tuple[str, dict[str, Any]]]]:
    """Each list endpoint's request at a page size."""
    pk = full["conversation"].pk
    cursor = str(full["messages"][-1].id)
    return {
        "conversations": lambda size: (url("conversation-list"), {"limit": size}),
        "conversation with messages": lambda size: (url("conversation-detail", pk), {"limit": size}),
        "conversation, cursor page": lambda size: (url("conversation-detail", pk), {"limit": size, "before": cursor}),
        "messages": lambda size: (url("message-list", pk), {"limit": size}),
        "messages, cursor page": lambda size: (url("message-list", pk), {"limit": size, "before": cursor, "order": "desc"}),
        "messages, counted cursor page": lambda size: (url("message-list", pk), {"limit": size, "before": cursor, "total": "true"}),
        "events": lambda size: (url("event-list", pk), {"limit": size}),
        "runs": lambda size: (url("conversation-runs", pk), {"limit": size}),
        "runs, cursor page": lambda size: (url("conversation-runs", pk), {"limit": size, "before": str(full["runs"][0].id)}),
        "files": lambda size: (url("file-list", pk), {"limit": size}),
        "files, cursor page": lambda size: (url("file-list", pk), {"limit": size, "after": str(full["files"][0].id)}),
        "tasks": lambda size: (url("task-list"), {"limit": size}),
        "tasks, uncounted": lambda size: (url("task-list"), {"limit": size, "total": "false"}),
        "tasks, cursor page": lambda size: (url("task-list"), {"limit": size, "before": str(full["tasks"][0].id)}),
    }


def queries_of(client: Any, path: str, query: dict[str, Any]) -> tuple[int, Any]:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(path, query)
    assert response.status_code == 200, response.content
    return len(captured), response.json()


def items_of(body: Any) -> list[Any]:
    if "messages" in body:
        body = body["messages"]
    return body.get("items", body.get("events"))


ENDPOINTS = (
    "conversations",
    "conversation with messages",
    "conversation, cursor page",
    "messages",
    "messages, cursor page",
    "messages, counted cursor page",
    "events",
    "runs",
    "runs, cursor page",
    "files",
    "files, cursor page",
    "tasks",
    "tasks, uncounted",
    "tasks, cursor page",
)


def test_every_list_endpoint_runs_the_same_queries_for_5_and_50_rows(alice_client: Any, full: dict[str, Any]) -> None:
    requests = list_requests(full)
    assert tuple(requests) == ENDPOINTS
    counts = {}
    for endpoint, request in requests.items():
        small, small_body = queries_of(alice_client, *request(5))
        large, large_body = queries_of(alice_client, *request(50))
        assert (len(items_of(small_body)), len(items_of(large_body))) == (5, 50), endpoint
        counts[endpoint] = (small, large)
    assert {endpoint: small for endpoint, (small, _) in counts.items()} == {endpoint: large for endpoint, (_, large) in counts.items()}


def test_the_interrupt_list_runs_the_same_queries_for_5_and_50_interrupts(alice_client: Any, alice_scope: Scope) -> None:
    counts = []
    for rows in (5, 50):
        conversation = conversation_store().create(alice_scope)
        message = conversation_store().append_message(alice_scope, conversation.pk, role="user", content="go")
        run = run_store().create_or_resume(alice_scope, conversation.pk, id=uuid.uuid4(), message_id=message.id)
        for _ in range(rows):
            interrupt_store().create(alice_scope, conversation.pk, id=uuid.uuid4(), run_id=run.id, kind="generic")
        queries, body = queries_of(alice_client, url("conversation-interrupts", conversation.pk), {})
        assert len(body["interrupts"]) == rows
        counts.append(queries)
    assert counts[0] == counts[1]


def test_a_cursor_read_of_messages_is_one_statement(alice_client: Any, full: dict[str, Any]) -> None:
    """The page, its access check and its cursor in one statement (the API client is authenticated without a query)."""
    pk, cursor = full["conversation"].pk, str(full["messages"][30].id)
    queries, body = queries_of(alice_client, url("message-list", pk), {"before": cursor, "limit": 10})
    assert (queries, body["total"], body["has_more"], len(body["items"])) == (1, None, True, 10)


def test_a_cursor_read_of_runs_files_or_tasks_is_one_statement(alice_client: Any, full: dict[str, Any]) -> None:
    """As a message page: the access check and the cursor's key are subqueries of the page's one statement."""
    pk = full["conversation"].pk
    reads = {
        "runs": (url("conversation-runs", pk), {"before": str(full["runs"][30].id)}),
        "files": (url("file-list", pk), {"after": str(full["files"][30].id)}),
        "tasks": (url("task-list"), {"before": str(full["tasks"][30].id)}),
        "tasks of the conversation": (url("task-list"), {"before": str(full["tasks"][30].id), "conversation_id": str(pk)}),
    }
    for name, (path, query) in reads.items():
        queries, body = queries_of(alice_client, path, {**query, "limit": 10})
        assert (queries, body["total"], body["has_more"], len(body["items"])) == (1, None, True, 10), name
        assert str(full[name.split()[0]][31].id) == body["items"][0]["id"], name


def test_an_event_page_is_one_statement(alice_client: Any, full: dict[str, Any]) -> None:
    queries, body = queries_of(alice_client, url("event-list", full["conversation"].pk), {"after": 10, "limit": 10})
    assert (queries, [event["seq"] for event in body["events"]], body["has_more"]) == (1, list(range(11, 21)), True)


def test_total_is_null_on_cursor_reads_unless_asked_and_counted_otherwise(alice_client: Any, full: dict[str, Any]) -> None:
    pk, messages = full["conversation"].pk, full["messages"]
    read = lambda name, query: alice_client.get(url(name, pk), query).json()  # noqa: E731
    assert read("message-list", {"limit": 10})["total"] == ROWS
    assert read("message-list", {"limit": 10, "total": "false"})["total"] is None
    page = read("message-list", {"after": str(messages[9].id), "limit": 10})
    assert (page["total"], page["has_more"], page["items"][0]["content"]) == (None, True, "m10")
    page = read("message-list", {"after": str(messages[49].id), "limit": 10})
    assert (page["total"], page["has_more"]) == (None, False)
    assert read("message-list", {"after": str(messages[9].id), "total": "1"})["total"] == ROWS - 10
    assert read("conversation-detail", {"before": str(messages[5].id)})["messages"]["total"] is None
    assert read("conversation-detail", {"before": str(messages[5].id), "total": "true"})["messages"]["total"] == 5
    assert read("conversation-runs", {"total": "false", "limit": ROWS})["total"] is None
    assert read("file-list", {"total": "false", "limit": ROWS - 1})["has_more"] is True
    assert alice_client.get(url("conversation-list"), {"total": "0"}).json()["total"] is None


@pytest.mark.parametrize("name", ["conversation-list", "message-list", "task-list"])
def test_a_bad_total_is_400_invalid_parameter(alice_client: Any, alice_scope: Scope, name: str) -> None:
    conversation = conversation_store().create(alice_scope)
    for value in ("yes", "2", "truee", "true\x00", "1" * 10_000):
        path = url(name, conversation.pk) if name == "message-list" else url(name)
        response = alice_client.get(path, {"total": value})
        assert (response.status_code, response.json()["code"]) == (400, "invalid_parameter")


def test_an_uncounted_cursor_read_is_404_for_what_the_caller_may_not_see(
    alice_client: Any, bob_client: Any, full: dict[str, Any], alice_scope: Scope
) -> None:
    pk, cursor = full["conversation"].pk, str(full["messages"][5].id)
    assert bob_client.get(url("message-list", pk), {"before": cursor}).status_code == 404
    foreign = conversation_store().append_message(alice_scope, conversation_store().create(alice_scope).pk, role="user", content="x")
    assert alice_client.get(url("message-list", pk), {"before": str(foreign.id)}).status_code == 404
    conversation_store().share(alice_scope, pk)
    assert len(bob_client.get(url("message-list", pk), {"before": cursor}).json()["items"]) == 5


def test_one_pass_bodies_equal_the_serializers_data(full: dict[str, Any], alice_scope: Scope, settings: Any) -> None:
    pk = full["conversation"].pk
    task = task_store().list(alice_scope).items[0]
    task = task_store().set_result(alice_scope, task.pk, {"answer": 42})
    instances = {
        ConversationSerializer: conversation_store().list(alice_scope).items,
        MessageSerializer: full["messages"][:3],
        EventSerializer: event_store().list(alice_scope, pk, limit=3).events,
        RunSerializer: run_store().list(alice_scope, pk, limit=3).items,
        InterruptSerializer: interrupt_store().list(alice_scope, pk)[:3],
        FileSerializer: file_store().list(alice_scope, pk, limit=3).items,
        TaskSerializer: [task],
        TaskResultSerializer: [task],
    }
    settings.TIME_ZONE = "Europe/Lisbon"  # a zone DRF converts date-times to, as the serializers would
    for serializer_class, rows in instances.items():
        represent = representation(serializer_class)
        assert rows and [represent(row) for row in rows] == [dict(serializer_class(row).data) for row in rows]


def explain(sql: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
        cursor.execute("EXPLAIN " + sql)
        return "\n".join(row[0] for row in cursor.fetchall())


@pytest.mark.skipif(connection.vendor != "postgresql", reason="EXPLAIN plans of PostgreSQL")
def test_on_postgresql_cursor_pages_read_the_conversation_position_index(alice_scope: Scope) -> None:
    """Explained on a conversation of 3,000 messages and events among 20 smaller ones: a page is read, not the conversation."""
    conversations = conversation_store()
    for _ in range(20):
        other = conversations.create(alice_scope)
        conversations.merge_messages(alice_scope, other.pk, [{"role": "user", "content": str(n)} for n in range(50)])
    conversation = conversations.create(alice_scope)
    conversations.merge_messages(alice_scope, conversation.pk, [{"role": "user", "content": str(n)} for n in range(3000)])
    for _ in range(3):
        event_store().append(alice_scope, conversation.pk, [{"type": "note", "data": {}} for _ in range(1000)])
    cursor = Message.objects.get(conversation=conversation, position=1500)
    reads = {
        "before, newest first": (
            "Index Scan Backward using ap_message_position_unique",
            lambda: conversations.list_messages(alice_scope, conversation.pk, before=cursor.id, order="desc", limit=20),
        ),
        "after": ("Index Scan using ap_message_position_unique", lambda: conversations.list_messages(alice_scope, conversation.pk, after=cursor.id, limit=20)),
        "events after": ("Index Scan using ap_event_seq_unique", lambda: event_store().list(alice_scope, conversation.pk, after=1500, limit=20)),
    }
    for name, (index, read) in reads.items():
        with CaptureQueriesContext(connection) as captured:
            page = read()
        assert len(page.events if hasattr(page, "events") else page.items) == 20
        plan = explain(captured.captured_queries[-1]["sql"])  # the page (events: after the access check)
        # The page's rows come off the index in order (no sort); only the small conversation table may be scanned.
        assert index in plan and "Sort" not in plan, f"{name}:\n{plan}"
        assert "Seq Scan on agent_persistence_message" not in plan and "Seq Scan on agent_persistence_event" not in plan, plan


@pytest.mark.skipif(connection.vendor != "postgresql", reason="EXPLAIN plans of PostgreSQL")
def test_on_postgresql_run_file_and_task_cursor_pages_read_their_listing_index(alice_scope: Scope) -> None:
    """Explained on 3,000 runs, files and tasks of one conversation among 20 smaller ones (and another owner's
    3,000 tasks), timestamps tied in threes: a cursor page is read off its listing's index, never the table."""
    conversations = [conversation_store().create(alice_scope) for _ in range(21)]
    conversation, now = conversations[-1], timezone.now()

    def moments(count: int) -> list[Any]:
        return [now - timedelta(milliseconds=n // 3) for n in range(count)]

    tenant, owner = alice_scope.tenant, alice_scope.user
    for each in conversations:
        size = 3000 if each is conversation else 50
        Run.objects.bulk_create(Run(conversation=each, message_id=uuid7(), started_at=at) for at in moments(size))
        StoredFile.objects.bulk_create(
            StoredFile(conversation=each, name="f", size=1, content=f"explain/{uuid7()}", created_at=at) for at in moments(size)
        )
        Task.objects.bulk_create(
            Task(tenant=tenant, owner=owner, conversation=each, title="t", created_at=at) for at in moments(size)
        )
    Task.objects.bulk_create(Task(tenant=alice_scope.tenant, owner="someone else", title="t", created_at=at) for at in moments(3000))
    run = Run.objects.filter(conversation=conversation).order_by("started_at", "id")[1500]
    stored = StoredFile.objects.filter(conversation=conversation).order_by("created_at", "id")[1500]
    task = Task.objects.filter(conversation=conversation).order_by("created_at", "id")[1500]
    pk = conversation.pk
    reads = {
        "runs before, newest first": ("ap_run_conv_started", lambda: run_store().list(alice_scope, pk, before=run.id, limit=20)),
        "runs after, oldest first": (
            "ap_run_conv_started",
            lambda: run_store().list(alice_scope, pk, after=run.id, order="asc", limit=20),
        ),
        "files after": ("ap_file_conv_created", lambda: file_store().list(alice_scope, pk, after=stored.id, limit=20)),
        "files before, newest first": (
            "ap_file_conv_created",
            lambda: file_store().list(alice_scope, pk, before=stored.id, order="desc", limit=20),
        ),
        "tasks before": ("ap_task_owner_created", lambda: task_store().list(alice_scope, before=task.id, limit=20)),
        "tasks after, oldest first": (
            "ap_task_owner_created",
            lambda: task_store().list(alice_scope, after=task.id, order="asc", limit=20),
        ),
        "tasks of the conversation before": (
            "ap_task_conv_created",
            lambda: task_store().list(alice_scope, conversation_id=pk, before=task.id, limit=20),
        ),
    }
    for name, (index, read) in reads.items():
        with CaptureQueriesContext(connection) as captured:
            page = read()
        assert (len(captured), len(page.items), page.total) == (1, 20, None), name
        plan = explain(captured.captured_queries[-1]["sql"])
        # The page's rows come off the index in order (no sort of the listing); only the small conversation table may be scanned.
        assert index in plan and "Sort" not in plan, f"{name}:\n{plan}"
        assert not any(f"Seq Scan on agent_persistence_{table}" in plan for table in ("run", "storedfile", "task")), plan
