"""The authorization matrix: every endpoint of the API against five actors, each cell one exact status.

The endpoints are enumerated from the URLconf (``agent_persistence.api.urls``):
every (route name, HTTP method) the views answer must have a row in
:data:`MATRIX`, so an endpoint added without one fails
:func:`test_every_endpoint_has_a_matrix_row`. The actors:

- ``owner``: alice, who owns every row the test makes;
- ``other``: bob, another user of alice's tenant; alice's conversation is not shared;
- ``reader``: bob again, but alice's conversation is shared: he may read it, not write it;
- ``tenant``: mallory, a user of another tenant who carries alice's very user id
  (``tests.api.conftest.scope_from_user_names``), so only the tenant keeps them apart;
- ``anon``: no credentials.

What a user may not see answers 404 (never 403, which would confirm it exists);
a write by a reader of a shared conversation answers 403; anonymous requests
answer 403 ``not_authenticated``, because the test settings leave DRF's default
authentication classes (session first, and session authentication sends no
``WWW-Authenticate`` challenge, so DRF answers 403 rather than 401).

Each cell builds a fresh world (a conversation with a message, a file, a
task, a run and events; for some rows a dead turn or a turn parked on an
interrupt) so that a write of one cell never changes another.
"""

from __future__ import annotations

import io
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Callable

import pytest
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils import timezone
from rest_framework.test import APIClient

from agent_persistence.models import Run, TurnSupervision
from agent_persistence.runtime.lifecycle import begin_turn
from agent_persistence.scope import Scope
from agent_persistence.stores import (
    conversation_store,
    event_store,
    file_store,
    interrupt_store,
    run_store,
    supervision_store,
    task_store,
)

pytestmark = pytest.mark.django_db

#: Rows whose calls start, resume, stop or continue a turn: a producer on the process's producer loop
#: (another thread, its own connection) must see the world, so their cells commit it (transaction=True)
#: and wait for their producers. Every other cell runs in a rolled-back transaction and must start none.
PRODUCING_ROWS = {("turn-start", "POST"), ("turn-resume", "POST"), ("turn-cancel", "POST"), ("conversation-interrupts", "POST"),
                  ("interrupt-cancel", "POST"),  # cancelling the last pending interrupt continues the turn
                  ("aisdk-chat", "POST")}

ACTORS = ("owner", "other", "reader", "tenant", "anon")
#: Endpoints the matrix does not cover, with the reason (the schema itself is public).
NOT_IN_MATRIX = {
    ("schema", "GET"): "the OpenAPI schema is public",
    **{
        ("unknown-resource", method): "no resource: the API's JSON 404 for every caller (tests/api/test_slash_ids.py)"
        for method in ("GET", "POST", "PUT", "PATCH", "DELETE")
    },
}
FAST = {"HEARTBEAT_INTERVAL": 0.1, "DEAD_AFTER": 0.6, "RECORDING_FLUSH_INTERVAL": 0.05, "CHECKPOINT_INTERVAL": 0.2}
MCP_SERVERS = {
    "docs": {
        "authorization_endpoint": "https://auth.example.test/authorize",
        "token_endpoint": "https://auth.example.test/token",
        "client_id": "matrix-client",
        "client_secret": "matrix-client-secret-0123456789",
    }
}


# -- the world each cell acts on --------------------------------------------------------------------


@dataclass
class World:
    """alice's rows, by what the paths need."""

    owner: Scope
    conversation_id: uuid.UUID
    message_id: uuid.UUID
    file_id: uuid.UUID
    task_id: uuid.UUID
    run_id: uuid.UUID
    interrupt_ids: list[uuid.UUID] = field(default_factory=list)
    resumable_message_id: uuid.UUID | None = None


def build_world(owner: Scope, *, shared: bool, kind: str) -> World:
    """alice's conversation (shared for the reader), with a message, a file, a task, events and a run.

    ``kind`` adds what a row needs: "dead_turn" (a turn whose producer died),
    "waiting" (a turn parked on a pending interrupt), "running" (a turn whose
    producer is alive: a fresh heartbeat, no producer in this process),
    "mcp" (alice has begun authorizing the MCP server "docs").
    """
    conversations = conversation_store()
    conversation = conversations.create(owner, agent="echo", title="Matrix", shared=shared)
    message = conversations.append_message(owner, conversation.id, role="user", content="hello")
    stored = file_store().save(
        owner, conversation_id=conversation.id, content=io.BytesIO(b"notes"), name="notes.txt", content_type="text/plain"
    )
    task = task_store().create(owner, title="Follow up", conversation_id=conversation.id)
    event_store().append(owner, conversation.id, [{"type": "note", "data": {"text": "hello"}}])
    world = World(owner, conversation.id, message.id, stored.id, task.id, run_id=uuid.uuid4())
    if kind in ("plain", "mcp"):
        plan = begin_turn(owner, conversation.id, content="a finished turn", agent="echo")
        run_store().finish(owner, plan.run_id, status="completed", epoch=plan.epoch)
        supervision_store().finish(conversation.id, epoch=plan.epoch, message_id=plan.message_id, status="done")
        world.run_id = plan.run_id
    elif kind in ("dead_turn", "running"):
        plan = begin_turn(owner, conversation.id, content="hello", agent="scripted")
        age = timedelta(minutes=1) if kind == "dead_turn" else timedelta(0)
        TurnSupervision.objects.filter(conversation_id=conversation.id).update(heartbeat_at=timezone.now() - age)
        world.run_id, world.resumable_message_id = plan.run_id, plan.message_id
    elif kind == "waiting":
        plan = begin_turn(owner, conversation.id, content="hello", agent="scripted")
        interrupt = interrupt_store().create(
            owner, conversation.id, id=uuid.uuid4(), run_id=plan.run_id, kind="generic", payload={"question": "ok?"}
        )
        run_store().set_status(owner, plan.run_id, "interrupted")
        supervision_store().finish(conversation.id, epoch=plan.epoch, message_id=plan.message_id, status="done")
        world.run_id, world.interrupt_ids = plan.run_id, [interrupt.id]
    if kind == "mcp":
        from agent_persistence.oauth.store import integration_store

        integration_store().begin_authorization(owner, "docs", redirect_uri="https://app.example.test/callback")
    return world


# -- the matrix -------------------------------------------------------------------------------------


def read(ok: int = 200) -> dict[str, int]:
    """A read of alice's conversation (or of a row in it): the reader may, the others do not see it."""
    return {"owner": ok, "other": 404, "reader": ok, "tenant": 404, "anon": 403}


def write(ok: int) -> dict[str, int]:
    """A write to alice's conversation: the reader is refused (403), the others do not see it."""
    return {"owner": ok, "other": 404, "reader": 403, "tenant": 404, "anon": 403}


def owner_only(ok: int) -> dict[str, int]:
    """A row only its owner sees, shared conversation or not (tasks)."""
    return {"owner": ok, "other": 404, "reader": 404, "tenant": 404, "anon": 403}


def everyone(ok: int) -> dict[str, int]:
    """A collection of the caller's own rows: every authenticated actor gets their own."""
    return {"owner": ok, "other": ok, "reader": ok, "tenant": ok, "anon": 403}


Path = Callable[[World], str]


@dataclass(frozen=True)
class Row:
    """One endpoint: how to call it on a world, which world it needs, and each actor's status."""

    path: Path
    expected: dict[str, int]
    body: Callable[[World], Any] | None = None
    format: str = "json"
    headers: Callable[[World], dict[str, str]] | None = None
    world: str = "plain"


def conversation(*parts: str) -> Path:
    return lambda w: "/api/conversations/" + "".join(f"{p}/" for p in (str(w.conversation_id), *parts))


def upload(w: World) -> dict[str, Any]:
    content = io.BytesIO(b"more notes")
    content.name = "more.txt"
    return {"file": content}


MATRIX: dict[tuple[str, str], Row] = {
    # conversations
    ("conversation-list", "GET"): Row(lambda w: "/api/conversations/", everyone(200)),
    ("conversation-list", "POST"): Row(lambda w: "/api/conversations/", everyone(201), body=lambda w: {"title": "Mine"}),
    ("conversation-detail", "GET"): Row(conversation(), read()),
    ("conversation-detail", "PATCH"): Row(
        conversation(), write(200), body=lambda w: {"title": "Renamed"}, headers=lambda w: {"HTTP_IF_MATCH": '"0"'}
    ),
    ("conversation-detail", "DELETE"): Row(conversation(), write(204)),
    ("conversation-share", "POST"): Row(conversation("share"), write(200)),
    ("conversation-share", "DELETE"): Row(conversation("share"), write(200)),
    # messages
    ("message-list", "GET"): Row(conversation("messages"), read()),
    ("message-list", "POST"): Row(conversation("messages"), write(201), body=lambda w: {"role": "user", "content": "more"}),
    ("message-detail", "PATCH"): Row(
        lambda w: conversation("messages", str(w.message_id))(w), write(200), body=lambda w: {"content": "edited"}
    ),
    ("message-detail", "DELETE"): Row(lambda w: conversation("messages", str(w.message_id))(w), write(204)),
    # events
    ("event-list", "GET"): Row(conversation("events"), read()),
    # turns, runs, interrupts
    ("turn-start", "POST"): Row(conversation("turns"), write(202), body=lambda w: {"content": "next", "agent": "echo"}),
    ("turn-resume", "POST"): Row(conversation("turns", "resume"), write(202), body=lambda w: {}, world="dead_turn"),
    ("turn-cancel", "POST"): Row(conversation("turns", "cancel"), write(202), world="running"),
    ("conversation-stream", "GET"): Row(conversation("stream"), read()),
    ("conversation-runs", "GET"): Row(conversation("runs"), read()),
    ("run-detail", "GET"): Row(lambda w: f"/api/runs/{w.run_id}/", read()),
    ("conversation-interrupts", "GET"): Row(conversation("interrupts"), read(), world="waiting"),
    ("conversation-interrupts", "POST"): Row(
        conversation("interrupts"),
        write(200),
        body=lambda w: {"answers": [{"id": str(i), "response": {"approved": True}} for i in w.interrupt_ids]},
        world="waiting",
    ),
    # files
    ("file-list", "GET"): Row(conversation("files"), read()),
    ("file-list", "POST"): Row(conversation("files"), write(201), body=upload, format="multipart"),
    ("file-detail", "GET"): Row(lambda w: f"/api/files/{w.file_id}/", read()),
    ("file-detail", "DELETE"): Row(lambda w: f"/api/files/{w.file_id}/", write(204)),
    ("file-content", "GET"): Row(lambda w: f"/api/files/{w.file_id}/content/", read()),
    # tasks
    ("task-list", "GET"): Row(lambda w: "/api/tasks/", everyone(200)),
    ("task-list", "POST"): Row(lambda w: "/api/tasks/", everyone(201), body=lambda w: {"title": "Mine"}),
    ("task-detail", "GET"): Row(lambda w: f"/api/tasks/{w.task_id}/", owner_only(200)),
    ("task-detail", "PATCH"): Row(lambda w: f"/api/tasks/{w.task_id}/", owner_only(200), body=lambda w: {"title": "Renamed"}),
    ("task-detail", "DELETE"): Row(lambda w: f"/api/tasks/{w.task_id}/", owner_only(204)),
    ("task-comments", "POST"): Row(lambda w: f"/api/tasks/{w.task_id}/comments/", owner_only(201), body=lambda w: {"text": "Noted"}),
    ("task-result", "GET"): Row(lambda w: f"/api/tasks/{w.task_id}/result/", owner_only(200)),
    ("task-result", "PUT"): Row(lambda w: f"/api/tasks/{w.task_id}/result/", owner_only(200), body=lambda w: {"result": {"ok": True}}),
    # MCP OAuth: every user has their own integrations; alice's pending one is hers alone.
    ("mcp-integrations", "GET"): Row(lambda w: "/api/mcp/integrations/", everyone(200), world="mcp"),
    ("mcp-integration", "DELETE"): Row(lambda w: "/api/mcp/integrations/docs/", owner_only(204), world="mcp"),
    ("mcp-authorize", "POST"): Row(lambda w: "/api/mcp/integrations/docs/authorize/", everyone(201), body=lambda w: {}),
    # The callback is open to anonymous requests (the authorization server redirects a browser there): the
    # single-use state alone names the authorization, so an unknown one is 400 invalid_state for everyone.
    ("mcp-callback", "GET"): Row(
        lambda w: "/api/mcp/oauth/callback/?state=unknown-state&code=x", {**everyone(400), "anon": 400}
    ),
    # whole-thread saves of the messages: PUT overwrites, PATCH merges by id
    ("message-list", "PUT"): Row(
        conversation("messages"),
        write(200),
        body=lambda w: {"messages": [{"id": str(w.message_id), "role": "user", "content": "kept"}]},
    ),
    ("message-list", "PATCH"): Row(
        conversation("messages"), write(200), body=lambda w: {"messages": [{"role": "user", "content": "merged"}]}
    ),
    # the run lifecycle: subagent runs, a run's interrupts, cancelling one interrupt
    ("run-children", "GET"): Row(lambda w: f"/api/runs/{w.run_id}/children/", read()),
    ("run-interrupts", "GET"): Row(lambda w: f"/api/runs/{w.run_id}/interrupts/", read(), world="waiting"),
    ("interrupt-cancel", "POST"): Row(
        lambda w: f"/api/interrupts/{w.interrupt_ids[0]}/cancel/", write(200), world="waiting"
    ),
    # websocket tickets: any user gets one for their own scope; one bound to a conversation needs read access.
    ("ws-ticket", "POST"): Row(lambda w: "/api/ws-ticket/", everyone(201)),
    ("conversation-ws-ticket", "POST"): Row(conversation("ws-ticket"), read(201)),
    # artifacts (of alice's finished chat run) and generation runs (filed in alice's conversation)
    ("conversation-artifacts", "GET"): Row(conversation("artifacts"), read()),
    ("run-artifacts", "GET"): Row(lambda w: f"/api/runs/{with_artifact(w).source_run_id}/artifacts/", read()),
    ("run-artifacts", "DELETE"): Row(lambda w: f"/api/runs/{with_artifact(w).source_run_id}/artifacts/", write(204)),
    ("artifact-detail", "GET"): Row(lambda w: f"/api/artifacts/{with_artifact(w).pk}/", read()),
    ("artifact-detail", "DELETE"): Row(lambda w: f"/api/artifacts/{with_artifact(w).pk}/", write(204)),
    ("artifact-content", "GET"): Row(lambda w: f"/api/artifacts/{with_artifact(w).pk}/content/", read()),
    ("generation-run-list", "POST"): Row(
        lambda w: "/api/generation-runs/", everyone(200), body=lambda w: {"id": str(uuid.uuid4()), "slot": "hero", "kind": "image"}
    ),
    ("generation-run-latest", "GET"): Row(lambda w: f"/api/generation-runs/latest/?slot={with_generation(w).slot}", owner_only(200)),
    ("generation-run-detail", "GET"): Row(lambda w: f"/api/generation-runs/{with_generation(w).pk}/", read()),
    ("generation-run-detail", "PATCH"): Row(
        lambda w: f"/api/generation-runs/{with_generation(w).pk}/", write(200), body=lambda w: {"status": "completed"}
    ),
    ("generation-run-detail", "DELETE"): Row(lambda w: f"/api/generation-runs/{with_generation(w).pk}/", write(204)),
    # activity rows and reconstruct-for-reload
    ("conversation-activities", "GET"): Row(conversation("activities"), read()),
    ("conversation-activities", "PUT"): Row(
        conversation("activities"), write(200),
        body=lambda w: {"activities": [{"activity_type": "web_search", "content": {"found": 1}}]},
    ),
    ("conversation-reconstruct", "GET"): Row(conversation("reconstruct"), read()),
    # AG-UI over server-sent events: reading the stream (and answering through POST's resume) needs read access
    ("conversation-agui", "GET"): Row(conversation("agui"), read()),
    ("conversation-agui", "POST"): Row(
        conversation("agui"), read(), body=lambda w: {"threadId": str(w.conversation_id), "runId": "matrix", "messages": []}
    ),
    # The AI SDK: a question starts a turn (a write); the resume stream of a turn parked on an interrupt is a read
    ("aisdk-chat", "POST"): Row(lambda w: "/api/aisdk/chat", write(200), body=lambda w: {
        "id": str(w.conversation_id), "agent": "echo",
        "messages": [{"id": "matrix", "role": "user", "parts": [{"type": "text", "text": "next"}]}],
    }),
    ("aisdk-chat-stream", "GET"): Row(lambda w: f"/api/aisdk/chat/{w.conversation_id}/stream", read(), world="waiting"),
}


# -- enumerating the URLconf ------------------------------------------------------------------------


def api_endpoints() -> set[tuple[str, str]]:
    """Every (route name, method) that ``agent_persistence.api.urls`` answers, OPTIONS and HEAD aside."""
    endpoints: set[tuple[str, str]] = set()

    def walk(patterns: list[Any]) -> None:
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                walk(pattern.url_patterns)
            elif isinstance(pattern, URLPattern):
                view_class = getattr(pattern.callback, "view_class", None) or getattr(pattern.callback, "cls", None)
                methods = [m for m in ("get", "post", "put", "patch", "delete") if hasattr(view_class, m)]
                endpoints.update((pattern.name or pattern.pattern.describe(), m.upper()) for m in methods)

    walk(get_resolver("agent_persistence.api.urls").url_patterns)
    return endpoints


def test_every_endpoint_has_a_matrix_row() -> None:
    """A new endpoint without a row fails here; so does a row for an endpoint that went away."""
    endpoints = api_endpoints() - set(NOT_IN_MATRIX)
    assert sorted(endpoints - set(MATRIX)) == [], "endpoints without a row in the authorization matrix"
    assert sorted(set(MATRIX) - endpoints) == [], "matrix rows for endpoints the URLconf does not have"


# -- the cells --------------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def matrix_settings(settings: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """Fast supervision timings, the tenant-aware scope resolver and one configured MCP server."""
    settings.AGENT_PERSISTENCE = {
        **settings.AGENT_PERSISTENCE,
        **FAST,
        "SCOPE_RESOLVER": "tests.api.conftest.scope_from_user_names",
        "MCP_SERVERS": MCP_SERVERS,
    }
    monkeypatch.setenv("AP_TOOL_LOG", str(tmp_path / "tools.log"))
    monkeypatch.setenv("AP_CHUNK_DELAY", "0.002")


@pytest.fixture
def actors(alice_user: Any, bob_user: Any, mallory_user: Any) -> dict[str, Any]:
    return {"owner": alice_user, "other": bob_user, "reader": bob_user, "tenant": mallory_user, "anon": None}


def call(client: APIClient, method: str, row: Row, world: World) -> Any:
    kwargs: dict[str, Any] = {}
    if row.body is not None:
        kwargs["data"] = row.body(world)
        kwargs["format"] = row.format
    if row.headers is not None:
        kwargs.update(row.headers(world))
    return getattr(client, method.lower())(row.path(world), **kwargs)


CELLS = [
    pytest.param(
        name, method, actor, id=f"{method} {name} as {actor}",
        marks=[pytest.mark.django_db(transaction=True)] if (name, method) in PRODUCING_ROWS else [],
    )
    for (name, method) in MATRIX
    for actor in ACTORS
]


@pytest.mark.parametrize(("name", "method", "actor"), CELLS)
def test_cell(name: str, method: str, actor: str, actors: dict[str, Any], alice_scope: Scope, request: pytest.FixtureRequest) -> None:
    """The endpoint answers the actor exactly the matrix's status, with an error body carrying its code."""
    row = MATRIX[(name, method)]
    producing = (name, method) in PRODUCING_ROWS
    if producing:
        request.getfixturevalue("drained_producer_loop")
    world = build_world(alice_scope, shared=actor == "reader", kind=row.world)
    client = APIClient()
    if actors[actor] is not None:
        client.force_authenticate(actors[actor])
    runs = Run.objects.count()
    response = call(client, method, row, world)
    if not producing:
        assert Run.objects.count() <= runs, f"{method} {name} started a run: add the row to PRODUCING_ROWS"
    if getattr(response, "streaming", False):
        b"".join(response.streaming_content)
        response.close()
    expected = row.expected[actor]
    body = getattr(response, "data", None)
    assert response.status_code == expected, f"{method} {row.path(world)} as {actor}: {response.status_code} {body}"
    if expected >= 400:
        assert response["Content-Type"].startswith("application/json")
        error = response.json()
        assert isinstance(error.get("code"), str) and error["code"] and isinstance(error.get("message"), str)
        if expected == 403 and actor == "anon":
            assert error["code"] == "not_authenticated"
        if expected == 404:
            assert error["code"].endswith("not_found") or error["code"] == "not_found", error


def test_lists_show_alice_s_rows_only_to_whom_may_see_them(actors: dict[str, Any], alice_scope: Scope) -> None:
    """The collections answer 200 to everyone and list the caller's own rows: alice's, shared or not, only to her."""
    private = build_world(alice_scope, shared=False, kind="plain")
    shared = build_world(alice_scope, shared=True, kind="plain")

    def listed(actor: str, path: str) -> set[str]:
        client = APIClient()
        client.force_authenticate(actors[actor])
        response = client.get(path)
        assert response.status_code == 200
        return {item["id"] for item in response.json()["items"]}

    mine = {str(private.conversation_id), str(shared.conversation_id)}
    assert listed("owner", "/api/conversations/") >= mine
    assert listed("other", "/api/conversations/") & mine == set()
    assert listed("tenant", "/api/conversations/") & mine == set()
    assert listed("owner", "/api/tasks/") >= {str(private.task_id), str(shared.task_id)}
    assert listed("other", "/api/tasks/") & {str(private.task_id), str(shared.task_id)} == set()
    assert listed("tenant", "/api/tasks/") & {str(private.task_id), str(shared.task_id)} == set()


# -- artifacts and generation runs (issue 11): rows made on the world when a row's path needs them ----


def with_artifact(w: World) -> Any:
    """An artifact of alice's run in the world (made once per world)."""
    from agent_persistence.stores import artifact_store

    if not hasattr(w, "artifact"):
        w.artifact = artifact_store().save(w.owner, run_id=w.run_id, content=b"PNG", media_type="image/png")  # type: ignore[attr-defined]
    return w.artifact  # type: ignore[attr-defined]


def with_generation(w: World) -> Any:
    """A generation run of alice's, filed in the world's conversation (made once per world)."""
    from agent_persistence.stores import generation_run_store

    if not hasattr(w, "generation"):
        w.generation = generation_run_store().create_or_resume(  # type: ignore[attr-defined]
            w.owner, id=uuid.uuid4(), slot="hero", kind="image", conversation_id=w.conversation_id
        )
    return w.generation  # type: ignore[attr-defined]
