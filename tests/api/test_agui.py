"""The AG-UI endpoint (``conversations/<id>/agui/``) with real producers, read through Django's test client.

The test client is synchronous, so the endpoint streams through
:func:`agent_persistence.agui.streams.blocking_event_stream` (the ASGI path is
run by the live servers of ``tests/clients/test_agui_client.py`` and the
schemathesis run). Every event is parsed back into the ``ag-ui-protocol``
package's models, and every stream is checked against the AG-UI event order
(:func:`check_sequence`).
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, Callable

import pydantic
import pytest
from ag_ui.core import Event, EventType
from rest_framework.test import APIClient

from agent_persistence.realtime.delivery import hub
from agent_persistence.scope import Scope
from agent_persistence.stores import conversation_store
from tests.agents import ANSWER

pytestmark = pytest.mark.django_db(transaction=True)

FAST = {"HEARTBEAT_INTERVAL": 0.1, "DEAD_AFTER": 0.6, "RECORDING_FLUSH_INTERVAL": 0.05, "CHECKPOINT_INTERVAL": 0.2}
EVENT = pydantic.TypeAdapter(Event)


@pytest.fixture(autouse=True)
def fast_turns(settings: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    settings.AGENT_PERSISTENCE = {**settings.AGENT_PERSISTENCE, **FAST}
    monkeypatch.setenv("AP_TOOL_LOG", str(tmp_path / "tools.log"))
    monkeypatch.setenv("AP_CHUNK_DELAY", "0.002")


@pytest.fixture(autouse=True)
def drained(drained_producer_loop: None) -> None:
    """Every test here waits for its producers (conftest's drained_producer_loop)."""


def agui_url(conversation_id: Any) -> str:
    return f"/api/conversations/{conversation_id}/agui/"


def parse_sse(text: str) -> list[tuple[str | None, Any]]:
    """(id, event model) of every SSE event of ``text``; comments are skipped."""
    events = []
    for block in text.split("\n\n"):
        event_id, data = None, []
        for line in block.split("\n"):
            if line.startswith("id: "):
                event_id = line[4:]
            elif line.startswith("data: "):
                data.append(line[6:])
        if data:
            events.append((event_id, EVENT.validate_python(json.loads("\n".join(data)))))
    return events


def check_sequence(events: list[Any]) -> None:
    """The AG-UI order: RUN_STARTED first, one run end last, content only inside an open message or call."""
    types = [event.type for event in events]
    assert types[0] == EventType.RUN_STARTED, types[:3]
    assert types[-1] in (EventType.RUN_FINISHED, EventType.RUN_ERROR), types[-3:]
    assert sum(t in (EventType.RUN_FINISHED, EventType.RUN_ERROR) for t in types) == 1
    open_messages: set[str] = set()
    open_calls: set[str] = set()
    for event in events:
        if event.type == EventType.TEXT_MESSAGE_START:
            assert event.message_id not in open_messages
            open_messages.add(event.message_id)
        elif event.type == EventType.TEXT_MESSAGE_CONTENT:
            assert event.message_id in open_messages and event.delta
        elif event.type == EventType.TEXT_MESSAGE_END:
            open_messages.remove(event.message_id)
        elif event.type == EventType.TOOL_CALL_START:
            assert event.tool_call_id not in open_calls
            open_calls.add(event.tool_call_id)
        elif event.type in (EventType.TOOL_CALL_ARGS, EventType.TOOL_CALL_END):
            assert event.tool_call_id in open_calls
            if event.type == EventType.TOOL_CALL_END:
                open_calls.remove(event.tool_call_id)
        elif event.type in (EventType.RUN_FINISHED, EventType.RUN_ERROR):
            assert not open_messages and not open_calls, "the run ended with a message or a call open"


def text_of(events: list[Any]) -> str:
    return "".join(event.delta for event in events if event.type == EventType.TEXT_MESSAGE_CONTENT)


def results_of(events: list[Any]) -> list[tuple[str, Any]]:
    return [(event.tool_call_id, json.loads(event.content)) for event in events if event.type == EventType.TOOL_CALL_RESULT]


def read_stream(response: Any, stop: Callable[[list[Any]], bool] | None = None) -> tuple[list[tuple[str | None, Any]], str]:
    """The events of a streaming response, read until the end (or until ``stop`` says so); the raw text too."""
    assert response.status_code == 200, getattr(response, "data", None)
    assert response["Content-Type"] == "text/event-stream"
    raw = ""
    events: list[tuple[str | None, Any]] = []
    for part in response.streaming_content:
        raw += part.decode()
        events = parse_sse(raw)
        if stop is not None and stop([event for _, event in events]):
            break
    response.close()
    return events, raw


def start_turn(client: APIClient, conversation_id: Any, agent: str = "scripted") -> dict[str, Any]:
    response = client.post(f"/api/conversations/{conversation_id}/turns/", {"content": "go", "agent": agent}, format="json")
    assert response.status_code == 202, response.data
    return response.json()


@pytest.fixture
def conversation_id(alice_scope: Scope) -> uuid.UUID:
    return conversation_store().create(alice_scope, agent="scripted").id


def test_a_turn_streams_as_one_valid_ag_ui_run_with_its_text_and_tool_result(alice_client: APIClient, conversation_id: uuid.UUID) -> None:
    """Every event parses as an ag-ui-protocol model, the order is AG-UI's, text and tool result are the stored ones."""
    turn = start_turn(alice_client, conversation_id)
    pairs, _ = read_stream(alice_client.get(agui_url(conversation_id)))
    events = [event for _, event in pairs]
    check_sequence(events)
    assert events[0].thread_id == str(conversation_id) and events[0].run_id == turn["message_id"]
    assert events[0].protocol_version == "1.0"
    assert text_of(events) == ANSWER
    assert results_of(events) == [("call-1", {"answer": "result of q1"})]
    assert events[-1].type == EventType.RUN_FINISHED and events[-1].outcome.type == "success"
    snapshots = [event.snapshot["turn"]["state"] for event in events if event.type == EventType.STATE_SNAPSHOT]
    assert snapshots[-1] == "done"
    assert all(event_id for event_id, _ in pairs), "every event carries an id"
    assert hub.count(conversation_id) == 0, "the stream let go of its hub subscription"
