"""Schemathesis against the served OpenAPI schema, on a live uvicorn server.

A real ASGI server process (``tests/api/live.py``) serves ``tests.urls`` on the
test database; schemathesis (its CLI, a subprocess) reads ``/api/schema/``
and sends generated requests, valid and invalid, to every operation, as a
user with HTTP basic credentials who owns a conversation, a message, a file
and a task whose ids are given to the operations that take them (so reads and
writes reach real rows, not only 404s). The run fails on any 5xx, any status
the schema does not declare, and any response body that does not conform to
the schema, and on any request not answered within 10 s. Examples per
operation are bounded (the examples, coverage and fuzzing phases; no
stateful phase) so the run takes well under a minute on a 2-core machine.
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
from agent_persistence.stores import conversation_store, file_store, task_store

from .live import live_server

pytestmark = pytest.mark.django_db(transaction=True)

USERNAME = "fuzzer"
PASSWORD = "fuzzer-password"
CHECKS = "not_a_server_error,status_code_conformance,response_schema_conformance"
MAX_EXAMPLES = 12
#: The run takes about 35 s on SQLite on 2 cores; past this the test fails rather than hangs.
RUN_TIMEOUT = 240
SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")


def seed_rows(user_pk: Any) -> dict[str, str]:
    """Rows of the fuzzing user, by the path parameter names that address them."""
    scope = Scope(tenant="", user=str(user_pk))
    conversation = conversation_store().create(scope, agent="echo", title="Fuzzed")
    message = conversation_store().append_message(scope, conversation.id, role="user", content="hello")
    stored = file_store().save(
        scope, conversation_id=conversation.id, content=io.BytesIO(b"some bytes"), name="notes.txt", content_type="text/plain"
    )
    task = task_store().create(scope, title="A task", conversation_id=conversation.id)
    return {
        "conversation_id": str(conversation.id),
        "message_id": str(message.id),
        "file_id": str(stored.id),
        "task_id": str(task.id),
    }


def path_parameter_names(schema: dict[str, Any]) -> set[str]:
    names = set()
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            if isinstance(operation, dict):
                names.update(p["name"] for p in operation.get("parameters", []) if p.get("in") == "path")
    return names


def write_config(directory: Path, parameters: dict[str, str]) -> Path:
    """A schemathesis.toml fixing the ids of the seeded rows for the operations that take them."""
    lines = ["[parameters]"] + [f'{name} = "{value}"' for name, value in sorted(parameters.items())]
    config = directory / "schemathesis.toml"
    config.write_text("\n".join(lines) + "\n")
    return config


def run_schemathesis(base_url: str, config: Path, report: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            str(SCHEMATHESIS),
            "--config-file",
            str(config),
            "run",
            f"{base_url}/api/schema/",
            "--url",
            f"{base_url}/api",
            "--auth",
            f"{USERNAME}:{PASSWORD}",
            "--checks",
            CHECKS,
            "--phases",
            "examples,coverage,fuzzing",
            "--max-examples",
            str(MAX_EXAMPLES),
            "--seed",
            "20261130",
            "--workers",
            "2",
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


def test_schemathesis_finds_no_server_error_and_no_nonconforming_response(tmp_path: Path) -> None:
    """Every generated request gets a declared status and a body that conforms to the schema; never a 5xx."""
    user = get_user_model().objects.create_user(USERNAME, password=PASSWORD)
    parameters = seed_rows(user.pk)
    with live_server() as base_url:
        schema = httpx.get(f"{base_url}/api/schema/", headers={"Accept": "application/json"}, timeout=20).json()
        assert schema["openapi"].startswith("3.")
        names = path_parameter_names(schema)
        config = write_config(tmp_path, {name: value for name, value in parameters.items() if name in names})
        result = run_schemathesis(base_url, config, tmp_path / "events.ndjson")
    assert result.returncode == 0, f"schemathesis found failures:\n{result.stdout[-20000:]}\n{result.stderr[-3000:]}"


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
