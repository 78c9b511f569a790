"""Schemathesis against the served OpenAPI schema, on a live uvicorn server; the schema's own promises.

A real ASGI server process (``tests/api/live.py``) serves ``tests.urls`` on the
test database; schemathesis (its CLI, a subprocess) reads ``/api/schema/``,
finds the API's base URL in the schema's ``servers`` (no ``--url`` is given),
and runs all four phases: examples, coverage, fuzzing and the stateful phase,
which follows the schema's OpenAPI links from each create to the operations
that take its id. The fuzzing user owns a conversation, a message, a file, a
task and a finished run whose ids are given to the operations that take them,
and destructive operations get rows of their own (so a delete does not starve
the others of data). The run fails on any 5xx, any status the schema does not
declare, any response body that does not conform, any request not answered
within 10 s, and on schemathesis' "missing test data" and "schema validation
mismatch" warnings (``fail-on``), except for the few operations listed in
:data:`UNREACHABLE`, whose success needs state no request can make.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.contrib.auth import get_user_model

from agent_persistence.scope import Scope
from agent_persistence.stores import conversation_store, task_store

from .live import live_server

pytestmark = pytest.mark.django_db(transaction=True)

USERNAME = "fuzzer"
PASSWORD = "fuzzer-password"
CHECKS = "not_a_server_error,status_code_conformance,response_schema_conformance"
MAX_EXAMPLES = 6
#: The run takes about 2 to 3 minutes on SQLite on a quiet 2-core machine and up to 10 under heavy load; past
#: this the test fails rather than hangs.
RUN_TIMEOUT = 900
SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")

#: Operations whose success needs state that no API request can produce, so schemathesis' warnings about
#: them say nothing about the schema; each is covered by its own tests (tests/api/test_turns.py, tests/oauth/).
UNREACHABLE = {
    "interrupts_answer": "needs a pending interrupt, whose id only the agent that raised it knows",
    "turns_resume": "needs a turn whose producer died",
    "mcp_oauth_callback_retrieve": "needs the state of an authorization an authorization server redirected",
    "mcp_integrations_authorize_create": "needs an MCP server in MCP_SERVERS (the test settings configure none)",
    "mcp_integrations_destroy": "needs an MCP server in MCP_SERVERS (the test settings configure none)",
    "interrupts_cancel": "needs an interrupt, whose id only the agent that raised it knows",
    "artifacts_retrieve": "needs an artifact, which only server code saves (tests/api/test_artifacts.py)",
    "artifacts_content": "needs an artifact, which only server code saves (tests/api/test_artifacts.py)",
    "artifacts_destroy": "needs an artifact, which only server code saves (tests/api/test_artifacts.py)",
    "aisdk_chat": "its body names the chat: a generated id is a new conversation, whose first turn needs the name of a "
                  "registered agent (tests/api/test_aisdk.py sends it bodies of its own)",
}
#: Destructive operations, each given rows of its own (by the seed names below).
DESTRUCTIVE = {
    "conversations_destroy": {"conversation_id": "doomed_conversation_id"},
    "messages_destroy": {"conversation_id": "conversation_id", "message_id": "doomed_message_id"},
    "files_destroy": {"file_id": "doomed_file_id"},
    "tasks_destroy": {"task_id": "doomed_task_id"},
    "messages_replace": {"conversation_id": "thread_conversation_id"},
    "messages_merge": {"conversation_id": "thread_conversation_id"},
}


def upload(api: httpx.Client, conversation_id: str, name: str) -> str:
    response = api.post(f"/conversations/{conversation_id}/files/", files={"file": (name, io.BytesIO(b"some bytes"), "text/plain")})
    assert response.status_code == 201, response.text
    return response.json()["id"]


def seed_rows(user_pk: Any, api: httpx.Client) -> dict[str, str]:
    """Rows of the fuzzing user, by the path parameter names that address them (and the doomed ones').

    Files are uploaded and the run made over HTTP, so their content and rows are the live server's own.
    """
    scope = Scope(tenant="", user=str(user_pk))
    conversation = conversation_store().create(scope, agent="echo", title="Fuzzed")
    doomed = conversation_store().create(scope, agent="echo", title="Doomed")
    message = conversation_store().append_message(scope, conversation.id, role="user", content="hello")
    doomed_message = conversation_store().append_message(scope, conversation.id, role="user", content="bye")
    task = task_store().create(scope, title="A task", conversation_id=conversation.id)
    doomed_task = task_store().create(scope, title="Doomed task")
    started = api.post(f"/conversations/{conversation.id}/turns/", json={"content": "hi", "agent": "echo"})
    assert started.status_code == 202, started.text
    for _ in range(400):
        if api.get(f"/conversations/{conversation.id}/stream/").json()["state"] == "done":
            break
        time.sleep(0.05)
    return {
        "conversation_id": str(conversation.id),
        "message_id": str(message.id),
        "file_id": upload(api, str(conversation.id), "notes.txt"),
        "task_id": str(task.id),
        "run_id": started.json()["run_id"],
        "doomed_conversation_id": str(doomed.id),
        "doomed_message_id": str(doomed_message.id),
        "doomed_file_id": upload(api, str(conversation.id), "doomed.txt"),
        "doomed_task_id": str(doomed_task.id),
        # The whole-thread saves rewrite a conversation's messages: they get one of their own.
        "thread_conversation_id": str(conversation_store().create(scope, agent="echo", title="Saved whole").id),
    }


def path_parameters(schema: dict[str, Any]) -> dict[str, list[str]]:
    """{operationId: the names of its path parameters} for the operations that have some."""
    found = {}
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            if isinstance(operation, dict):
                names = [p["name"] for p in operation.get("parameters", []) if p.get("in") == "path"]
                if names:
                    found[operation["operationId"]] = names
    return found


def toml_value(value: Any) -> str:
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{name} = {toml_value(item)}" for name, item in sorted(value.items())) + " }"
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value)


#: Starts a turn in a conversation it creates (a fresh id each time), so fuzzed conversations' pending
#: interrupts and busy turns do not refuse every start; every other operation gets the seeded ids. The
#: coverage phase is off for it: that phase sends every case to one conversation id, so every start after
#: the first meets a live turn or pending interrupts (409); the other three phases exercise it.
FRESH_IDS = {"turns_start"}

#: Operations whose coverage phase is off because schemathesis' coverage generator crashes CPython 3.11.7
#: on their body schema (SystemError "AST constructor recursion depth mismatch", a CPython bug, in
#: building mutations of RunAgentInput's nested models); the other three phases still exercise them, and
#: tests/api/test_agui.py sends it hostile bodies of its own.
NO_COVERAGE = {"agui_run"}


def write_config(directory: Path, rows: dict[str, str], schema: dict[str, Any]) -> Path:
    """schemathesis.toml: per operation, the seeded ids (doomed ones for deletes); warnings that fail the run."""
    lines = ["[warnings]", 'fail-on = ["missing_test_data", "validation_mismatch"]']
    takes = path_parameters(schema)
    for operation_id in sorted(set(takes) | set(UNREACHABLE) | FRESH_IDS | NO_COVERAGE):
        settings: dict[str, Any] = {}
        if operation_id in takes and operation_id not in FRESH_IDS:
            seeds = DESTRUCTIVE.get(operation_id, {})
            settings["parameters"] = {name: rows[seeds.get(name, name)] for name in takes[operation_id] if seeds.get(name, name) in rows}
        if operation_id in DESTRUCTIVE:
            # Negative cases (an odd header, an extra query parameter) would delete the row before any positive one.
            settings["generation"] = {"mode": "positive"}
        if operation_id in FRESH_IDS | NO_COVERAGE:
            settings["phases"] = {"coverage": {"enabled": False}}
        if operation_id in UNREACHABLE:
            settings["warnings"] = False
        if not settings or settings == {"parameters": {}}:
            continue
        lines += ["", "[[operations]]", f'include-operation-id = "{operation_id}"']
        lines += [f"{key} = {toml_value(value)}" for key, value in settings.items() if value != {}]
    config = directory / "schemathesis.toml"
    config.write_text("\n".join(lines) + "\n")
    return config


def run_schemathesis(schema_url: str, config: Path, report: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            str(SCHEMATHESIS),
            "--config-file",
            str(config),
            "run",
            schema_url,
            "--auth",
            f"{USERNAME}:{PASSWORD}",
            "--checks",
            CHECKS,
            "--phases",
            "examples,coverage,fuzzing,stateful",
            "--max-examples",
            str(MAX_EXAMPLES),
            "--seed",
            "20261130",
            # One worker: with the seed, the same requests in the same order on every run, so a
            # failure seen in CI is one a developer can reproduce.
            "--workers",
            "1",
            "--request-timeout",
            "10",
            "--generation-database",
            "none",
            "--no-shrink",
            "--suppress-health-check",
            "all",
            "--no-color",
            "--report",
            "ndjson",
            "--report-ndjson-path",
            str(report),
        ],
        cwd=config.parent,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
    )


def failures_of(stdout: str) -> str:
    """The failures section of schemathesis' output, short enough to survive a CI excerpt (the whole is in schemathesis.out)."""
    start, end = stdout.find("FAILURES"), stdout.rfind("SUMMARY")
    section = stdout[start:end] if 0 <= start < end else stdout[-8000:]
    lines = [line for line in section.splitlines() if line.strip()]
    return "\n".join(lines)[:6000]


def response_statuses(report: Path) -> list[int]:
    """The status of every response schemathesis recorded, from its NDJSON report."""
    statuses = []
    for line in report.read_text().splitlines():
        event = json.loads(line)
        finished = event.get("ScenarioFinished")
        if finished is None:
            continue
        for interaction in finished["recorder"].get("interactions", {}).values():
            if interaction.get("response"):
                statuses.append(interaction["response"]["status_code"])
    return statuses


@pytest.mark.timeout(RUN_TIMEOUT + 120)
def test_schemathesis_finds_nothing_in_any_phase_stateful_included(tmp_path: Path) -> None:
    """No 5xx, no undeclared status, no nonconforming body, no missing test data, no validation mismatch."""
    user = get_user_model().objects.create_user(USERNAME, password=PASSWORD)
    # On PostgreSQL the server keeps its connections in Django's pool: a new connection for each of the
    # ~5,500 requests was about a quarter of the run's CPU, PostgreSQL's included (the fuzz is about the API, not connecting).
    with live_server(env={"AP_DB_POOL": "1,4,10"}) as base_url:
        with httpx.Client(base_url=f"{base_url}/api", auth=(USERNAME, PASSWORD), timeout=20) as api:
            rows = seed_rows(user.pk, api)
        schema = httpx.get(f"{base_url}/api/schema/", headers={"Accept": "application/json"}, timeout=20).json()
        assert schema["servers"] == [{"url": "/api", "description": "Where the host mounts the API."}]
        config = write_config(tmp_path, rows, schema)
        report = tmp_path / "events.ndjson"
        result = run_schemathesis(f"{base_url}/api/schema/", config, report)
    statuses = response_statuses(report)
    summary = result.stdout[result.stdout.rfind("SUMMARY") :]
    print(f"schemathesis: {len(statuses)} requests, {sum(s >= 500 for s in statuses)} 5xx\n{summary}")
    (tmp_path / "schemathesis.out").write_text(result.stdout + "\n" + result.stderr)
    assert result.returncode == 0, f"schemathesis found failures:\n{failures_of(result.stdout)}\n{result.stderr[-3000:]}"
    assert "Stateful" in result.stdout and "Scenarios:" in result.stdout, "the stateful phase did not run"
    assert not [s for s in statuses if s >= 500]
    assert len(statuses) > 1000


def test_the_schema_links_every_create_to_the_operations_that_take_its_id(transactional_db: None) -> None:
    """servers carries the mount prefix; every id path parameter is a uuid; creates link to their ids' users."""
    from django.test import Client

    schema = json.loads(Client().get("/api/schema/", HTTP_ACCEPT="application/json").content)
    assert schema["servers"][0]["url"] == "/api"
    operations = {
        operation["operationId"]: operation
        for methods in schema["paths"].values()
        for operation in methods.values()
        if isinstance(operation, dict)
    }
    takes: dict[str, set[str]] = {}
    needs: dict[str, set[str]] = {}
    for operation_id, operation in operations.items():
        for parameter in operation.get("parameters", []):
            if parameter["in"] == "path" and parameter["name"].endswith("_id"):
                assert parameter["schema"] == {"type": "string", "format": "uuid"}, (operation_id, parameter)
                takes.setdefault(parameter["name"], set()).add(operation_id)
                needs.setdefault(operation_id, set()).add(parameter["name"])
    links = {
        create: set(operations[create]["responses"][status]["links"])
        for create, status in [("conversations_create", "201"), ("messages_create", "201"), ("files_create", "201"),
                               ("tasks_create", "201"), ("turns_start", "202")]
    }
    assert {op for op in takes["conversation_id"] if needs[op] == {"conversation_id"}} <= links["conversations_create"]
    assert takes["message_id"] <= links["messages_create"]
    assert takes["file_id"] <= links["files_create"]
    assert takes["task_id"] <= links["tasks_create"]
    assert takes["run_id"] <= links["turns_start"]
    link = operations["conversations_create"]["responses"]["201"]["links"]["conversations_retrieve"]
    assert link == {
        "operationId": "conversations_retrieve",
        "parameters": {"conversation_id": "$response.body#/id"},
        "description": link["description"],
    }
    limit = next(p for p in operations["conversations_list"]["parameters"] if p["name"] == "limit")
    assert limit["schema"]["minimum"] == 1 and limit["schema"]["maximum"] == 1000
    assert operations["conversations_create"]["requestBody"]["content"].keys() == {"application/json"}
    assert operations["files_create"]["requestBody"]["content"].keys() == {"multipart/form-data"}
    assert schema["components"]["schemas"]["ConversationCreateInputRequest"]["additionalProperties"] is False


def test_the_id_cursor_listings_declare_before_after_and_their_total_rule(transactional_db: None) -> None:
    """Messages, runs, files and tasks page by ``before`` / ``after`` an id, uncounted from a cursor unless asked."""
    from django.test import Client

    schema = json.loads(Client().get("/api/schema/", HTTP_ACCEPT="application/json").content)
    operations = {operation["operationId"]: operation for methods in schema["paths"].values() for operation in methods.values()}
    for operation_id in ("messages_list", "runs_list", "files_list", "tasks_list"):
        query = {parameter["name"]: parameter for parameter in operations[operation_id]["parameters"] if parameter["in"] == "query"}
        assert {"limit", "offset", "order", "total", "before", "after"} <= set(query), operation_id
        assert query["before"]["schema"] == query["after"]["schema"] == {"type": "string"}, operation_id
        assert "false with before or after" in query["total"]["description"], operation_id


def test_the_served_schema_is_openapi_3_and_json(transactional_db: None) -> None:
    """The schema URL answers an OpenAPI 3 document, on a real server, without authentication."""
    with live_server() as base_url:
        response = httpx.get(f"{base_url}/api/schema/", headers={"Accept": "application/json"}, timeout=20)
    assert response.status_code == 200
    document = json.loads(response.text)
    assert document["openapi"].startswith("3.")
    assert "paths" in document


def test_a_turn_starts_and_finishes_on_a_live_asgi_server(transactional_db: None) -> None:
    """Under ASGI (a sync view in the server's sync thread) POST turns answers 202 at once and the turn finishes.

    The view hands the turn to the producer loop and waits for the claim; the
    producer's store calls must not need the very thread the view blocks.
    """
    get_user_model().objects.create_user(USERNAME, password=PASSWORD)
    conversation_id = "01a22c45-6711-7379-916f-4eadefdbb9db"
    with live_server() as base_url, httpx.Client(base_url=f"{base_url}/api", auth=(USERNAME, PASSWORD), timeout=15) as api:
        started = api.post(f"/conversations/{conversation_id}/turns/", json={"content": "hello", "agent": "echo"})
        assert started.status_code == 202, started.text
        for _ in range(200):
            status = api.get(f"/conversations/{conversation_id}/stream/").json()
            if status["state"] == "done":
                break
            time.sleep(0.05)
        assert status["state"] == "done"
        messages = api.get(f"/conversations/{conversation_id}/messages/").json()["items"]
    assert [message["role"] for message in messages] == ["user", "assistant"]
