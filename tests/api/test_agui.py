"""The AG-UI endpoint (``conversations/<id>/agui/``) with real producers, read through Django's test client.

The test client is synchronous, so the endpoint streams through
:func:`agent_persistence.realtime.sse.blocking_event_stream` (the ASGI path is
run by the live servers of ``tests/clients/test_agui_client.py`` and the
schemathesis run). Every event is parsed back into the ``ag-ui-protocol``
package's models, and every stream is checked against the AG-UI event order
(:func:`check_sequence`).
"""

from __future__ import annotations

import json
import uuid
from typing import Any, Callable

import pydantic
import pytest
from ag_ui.core import Event, EventType
from rest_framework.test import APIClient

from agent_persistence.realtime.delivery import hub
from agent_persistence.scope import Scope
from agent_persistence.stores import conversation_store
from tests.agents import ANSWER, CHUNKS, TOOL_AT

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


def finished_turn(client: APIClient, conversation_id: Any, agent: str = "echo") -> dict[str, Any]:
    """A turn started and streamed to its end (its seal committed), so nothing of it runs past the test."""
    turn = start_turn(client, conversation_id, agent)
    read_stream(client.get(agui_url(conversation_id)))
    return turn


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


def test_a_finished_turn_streams_whole_from_its_stored_answer(alice_client: APIClient, conversation_id: uuid.UUID) -> None:
    """Attached after the end: the status comes first, then the stored answer; the run ends only after it."""
    start_turn(alice_client, conversation_id)
    read_stream(alice_client.get(agui_url(conversation_id)))
    pairs, _ = read_stream(alice_client.get(agui_url(conversation_id)))
    events = [event for _, event in pairs]
    check_sequence(events)
    assert events[1].snapshot["turn"]["state"] == "done"
    assert text_of(events) == ANSWER
    assert results_of(events) == [("call-1", {"answer": "result of q1"})]


def test_last_event_id_resumes_exactly_with_nothing_twice_and_nothing_lost(alice_client: APIClient, conversation_id: uuid.UUID) -> None:
    """A client that left mid-answer reconnects with the id of the last event it got: text and results add up exactly."""
    start_turn(alice_client, conversation_id)
    first, _ = read_stream(alice_client.get(agui_url(conversation_id)), stop=lambda events: len(text_of(events)) > 40)
    last_id = first[-1][0]
    assert last_id and first[-1][1].type != EventType.RUN_FINISHED
    second, _ = read_stream(alice_client.get(agui_url(conversation_id), HTTP_LAST_EVENT_ID=last_id))
    before, after = [event for _, event in first], [event for _, event in second]
    check_sequence(after)
    assert text_of(before) + text_of(after) == ANSWER
    assert results_of(before) + results_of(after) == [("call-1", {"answer": "result of q1"})]
    # The resumed stream reopens the same message (AG-UI clients keep it by id) instead of starting another.
    assert {e.message_id for e in before + after if e.type == EventType.TEXT_MESSAGE_START} == {str(before[1].snapshot["turn"]["messageId"])}
    # Resuming from the very last event of a finished run sends no text at all, only the run's frame.
    third, _ = read_stream(alice_client.get(agui_url(conversation_id), HTTP_LAST_EVENT_ID=second[-1][0]))
    check_sequence([event for _, event in third])
    assert text_of([event for _, event in third]) == "" and results_of([event for _, event in third]) == []
    assert hub.count(conversation_id) == 0


def test_a_resume_inside_a_tool_call_sends_its_arguments_and_result_once(alice_client: APIClient, conversation_id: uuid.UUID) -> None:
    """Cut right after TOOL_CALL_ARGS: the resumed stream reopens the call without its arguments and sends the result once."""
    start_turn(alice_client, conversation_id)
    first, _ = read_stream(
        alice_client.get(agui_url(conversation_id)), stop=lambda events: any(e.type == EventType.TOOL_CALL_ARGS for e in events)
    )
    # The client got everything up to the arguments (a chunk can end anywhere).
    first = first[: next(n for n, (_, e) in enumerate(first) if e.type == EventType.TOOL_CALL_ARGS) + 1]
    cut = first[-1][0]
    assert cut.endswith(":0:1"), cut
    second, _ = read_stream(alice_client.get(agui_url(conversation_id), HTTP_LAST_EVENT_ID=cut))
    after = [event for _, event in second]
    check_sequence(after)
    assert [e.type for e in after if e.type.name.startswith("TOOL_CALL")][:3] == [
        EventType.TOOL_CALL_START, EventType.TOOL_CALL_END, EventType.TOOL_CALL_RESULT
    ]
    assert text_of([event for _, event in first]) + text_of(after) == ANSWER
    assert results_of(after) == [("call-1", {"answer": "result of q1"})]


@pytest.mark.parametrize(
    "last_event_id",
    [
        "garbage",
        "-1",
        "0192f5e4-6a7b-7c3d-8e9f-0a1b2c3d4e5f:-1:0:0:0",
        "0192f5e4-6a7b-7c3d-8e9f-0a1b2c3d4e5f:1:99999999999999999999999:0:0",
        "0192f5e4-6a7b-7c3d-8e9f-0a1b2c3d4e5f:1:2:3:7",
        "0192F5E4-6A7B-7C3D-8E9F-0A1B2C3D4E5F:1:2:3:0",
        "x" * 10_000,
        "0192f5e4-6a7b-7c3d-8e9f-0a1b2c3d4e5f:1:2:3:0\u00e9",
    ],
    ids=["garbage", "negative", "negative-index", "huge-offset", "bad-flag", "upper-case", "long", "trailing"],
)
def test_a_last_event_id_that_is_not_one_of_ours_is_400(alice_client: APIClient, conversation_id: uuid.UUID, last_event_id: str) -> None:
    finished_turn(alice_client, conversation_id)
    response = alice_client.get(agui_url(conversation_id), HTTP_LAST_EVENT_ID=last_event_id)
    assert response.status_code == 400, response.content
    assert response["Content-Type"].startswith("application/json")
    assert response.json()["code"] == "invalid_last_event_id"
    assert response.json()["details"]["field"] == "Last-Event-ID"


def test_a_position_past_the_finished_turn_is_400_and_one_of_another_turn_is_410(alice_client: APIClient, conversation_id: uuid.UUID) -> None:
    turn = start_turn(alice_client, conversation_id)
    read_stream(alice_client.get(agui_url(conversation_id)))  # to its end
    message_id = turn["message_id"]
    for past in (f"{message_id}:0:{len(ANSWER) + 1}:0:0", f"{message_id}:0:0:2:0", f"{message_id}:0:0:1:1", f"{message_id}:99999:0:0:0"):
        response = alice_client.get(agui_url(conversation_id), HTTP_LAST_EVENT_ID=past)
        assert (response.status_code, response.json()["code"]) == (400, "invalid_last_event_id"), past
    response = alice_client.get(agui_url(conversation_id), HTTP_LAST_EVENT_ID=f"{uuid.uuid4()}:1:1:0:0")
    assert (response.status_code, response.json()["code"]) == (410, "turn_superseded")


def test_a_conversation_without_a_turn_is_409_and_others_conversations_are_404(
    alice_client: APIClient, bob_client: APIClient, conversation_id: uuid.UUID
) -> None:
    response = alice_client.get(agui_url(conversation_id))
    assert (response.status_code, response.json()["code"]) == (409, "no_turn")
    finished_turn(alice_client, conversation_id)
    for path in (agui_url(conversation_id), agui_url(uuid.uuid4()), agui_url("not-a-uuid")):
        response = bob_client.get(path)
        assert response.status_code == 404, path
        assert response["Content-Type"].startswith("application/json")


def test_post_takes_an_ag_ui_run_agent_input_and_echoes_its_run_id(alice_client: APIClient, conversation_id: uuid.UUID) -> None:
    """HttpAgent's request: the body is validated by the ag-ui-protocol model; its runId names the run."""
    finished_turn(alice_client, conversation_id)
    body = {"threadId": str(conversation_id), "runId": "run-7", "messages": [{"id": "u1", "role": "user", "content": "go"}],
            "state": {}, "tools": [], "context": [], "forwardedProps": {}}
    pairs, _ = read_stream(alice_client.post(agui_url(conversation_id), body, format="json", HTTP_ACCEPT="text/event-stream"))
    events = [event for _, event in pairs]
    check_sequence(events)
    assert events[0].run_id == events[-1].run_id == "run-7"
    for bad in ({"runId": "r"}, {"threadId": "t", "runId": 5, "messages": []}, [], {"threadId": "t", "runId": "r", "messages": [{"role": "nobody"}]}):
        response = alice_client.post(agui_url(conversation_id), bad, format="json", HTTP_ACCEPT="text/event-stream")
        assert response.status_code == 400, bad
        assert response["Content-Type"].startswith("application/json") and response.json()["code"] == "invalid"
    response = alice_client.post(agui_url(conversation_id), "threadId=t", content_type="application/x-www-form-urlencoded")
    assert response.status_code == 415


def test_a_turn_parked_on_an_approval_ends_the_run_with_an_interrupt_outcome(alice_client: APIClient, conversation_id: uuid.UUID) -> None:
    """AG-UI's interrupt: RUN_FINISHED with outcome interrupt naming the pending approval (and an activity snapshot of it)."""
    start_turn(alice_client, conversation_id, agent="approval")
    pairs, _ = read_stream(alice_client.get(agui_url(conversation_id)))
    events = [event for _, event in pairs]
    check_sequence(events)
    outcome = events[-1].outcome
    assert events[-1].type == EventType.RUN_FINISHED and outcome.type == "interrupt"
    (interrupt,) = outcome.interrupts
    assert interrupt.reason == "tool_approval" and interrupt.tool_call_id == "call-1"
    assert interrupt.metadata["payload"]["name"] == "lookup"
    activities = [event for event in events if event.type == EventType.ACTIVITY_SNAPSHOT]
    assert [a.message_id for a in activities] == [interrupt.id] and activities[0].activity_type == "interrupt"
    assert text_of(events) == "".join(CHUNKS[:TOOL_AT])


def test_an_errored_turn_ends_with_run_error(alice_client: APIClient, conversation_id: uuid.UUID) -> None:
    start_turn(alice_client, conversation_id, agent="failing")
    pairs, _ = read_stream(alice_client.get(agui_url(conversation_id)))
    events = [event for _, event in pairs]
    check_sequence(events)
    assert events[-1].type == EventType.RUN_ERROR and events[-1].message
    assert text_of(events) == "partial "


def test_the_openapi_schema_describes_both_methods_as_an_event_stream(anon_client: APIClient) -> None:
    schema = anon_client.get("/api/schema/", {"format": "json"}).json()
    path = schema["paths"]["/conversations/{conversation_id}/agui/"]
    for method, operation_id in (("get", "agui_stream"), ("post", "agui_run")):
        operation = path[method]
        assert operation["operationId"] == operation_id
        assert list(operation["responses"]["200"]["content"]) == ["text/event-stream"]
        assert {"400", "403", "404", "409", "410"} <= set(operation["responses"])
        headers = [p for p in operation["parameters"] if p["in"] == "header"]
        assert [p["name"] for p in headers] == ["Last-Event-ID"]
    body = path["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body["required"] == ["threadId", "runId", "messages"]


def test_a_run_with_resume_entries_answers_the_interrupt_and_streams_the_rest_of_the_turn(
    alice_client: APIClient, bob_client: APIClient, alice_scope: Scope, conversation_id: uuid.UUID
) -> None:
    """AG-UI's resume: approve the tool in the next run's input; it streams on from the interrupt, nothing twice."""
    turn = start_turn(alice_client, conversation_id, agent="approval")
    first, _ = read_stream(alice_client.get(agui_url(conversation_id)))
    (interrupt,) = first[-1][1].outcome.interrupts
    body = {"threadId": str(conversation_id), "runId": "run-2", "messages": [],
            "resume": [{"interruptId": interrupt.id, "status": "resolved", "payload": {"approved": True}}]}
    conversation_store().share(alice_scope, conversation_id)
    refused = bob_client.post(agui_url(conversation_id), body, format="json")  # a reader may stream, not answer
    assert (refused.status_code, refused.json()["code"]) == (403, "conversation_not_owned")
    second, _ = read_stream(alice_client.post(agui_url(conversation_id), body, format="json"))
    before, after = [event for _, event in first], [event for _, event in second]
    check_sequence(after)
    assert after[0].run_id == "run-2" and after[-1].outcome.type == "success"
    assert text_of(before) + text_of(after) == ANSWER
    assert results_of(after) == [("call-1", {"answer": "result of q1"})]
    assert {e.message_id for e in after if e.type == EventType.TEXT_MESSAGE_START} == {turn["message_id"]}


def test_a_retried_resume_answers_nothing_new_and_streams_again_from_where_the_interrupted_run_ended(
    alice_client: APIClient, conversation_id: uuid.UUID, tmp_path: Any
) -> None:
    """docs/reference/agui.md: the same POST with the same resume again (a client whose first response was lost)
    streams the turn from the same position as the first: the text and tool result after the interrupt, again;
    the tool ran once and the answer is not given twice."""
    turn = start_turn(alice_client, conversation_id, agent="approval")
    first, _ = read_stream(alice_client.get(agui_url(conversation_id)))
    (interrupt,) = first[-1][1].outcome.interrupts
    body = {"threadId": str(conversation_id), "runId": "run-2", "messages": [],
            "resume": [{"interruptId": interrupt.id, "status": "resolved", "payload": {"approved": True}}]}
    second, _ = read_stream(alice_client.post(agui_url(conversation_id), body, format="json"))
    third, _ = read_stream(alice_client.post(agui_url(conversation_id), body, format="json"))
    before, after, again = ([event for _, event in pairs] for pairs in (first, second, third))
    check_sequence(again)
    assert text_of(before) + text_of(after) == ANSWER
    assert text_of(again) == text_of(after) and text_of(again), "the retry streams from where the interrupted run ended"
    assert results_of(again) == results_of(after) == [("call-1", {"answer": "result of q1"})]
    assert again[-1].type == EventType.RUN_FINISHED and again[-1].outcome.type == "success"
    assert third[0][0] == second[0][0], "both start at the same position"
    assert (tmp_path / "tools.log").read_text().count("start q1") == 1, "the turn ran once"
    assert {e.message_id for e in again if e.type == EventType.TEXT_MESSAGE_START} == {turn["message_id"]}


def test_a_failure_inside_the_stream_ends_the_run_with_run_error_and_releases_everything(
    alice_client: APIClient, conversation_id: uuid.UUID, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Fault injection: translating a frame raises; the client gets RUN_ERROR internal_error, the log the traceback."""
    from agent_persistence.agui.events import Translator

    def broken(self: Translator, text: str) -> None:
        raise RuntimeError("a bug in the translation")

    finished_turn(alice_client, conversation_id, agent="scripted")
    monkeypatch.setattr(Translator, "text", broken)
    pairs, raw = read_stream(alice_client.get(agui_url(conversation_id)))
    events = [event for _, event in pairs]
    check_sequence(events)
    assert events[-1].type == EventType.RUN_ERROR and events[-1].code == "internal_error"
    assert "a bug in the translation" not in raw
    assert "a bug in the translation" in caplog.text
    assert hub.count(conversation_id) == 0


def test_a_silent_stretch_of_the_turn_gets_keep_alive_comments_between_whole_events(
    alice_client: APIClient, conversation_id: uuid.UUID, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the tool runs nothing is sent: an SSE comment goes out every KEEP_ALIVE seconds, and the run around it is whole."""
    monkeypatch.setattr("agent_persistence.realtime.sse.KEEP_ALIVE", 0.05)
    monkeypatch.setenv("AP_TOOL_SECONDS", "0.5")
    start_turn(alice_client, conversation_id)
    pairs, raw = read_stream(alice_client.get(agui_url(conversation_id)))
    events = [event for _, event in pairs]
    check_sequence(events)
    assert raw.count(": keep-alive\n\n") >= 3, "a comment per KEEP_ALIVE of the tool's half second"
    assert text_of(events) == ANSWER and events[-1].type == EventType.RUN_FINISHED
    assert hub.count(conversation_id) == 0


def test_deleting_the_conversation_mid_turn_ends_the_stream(alice_client: APIClient, conversation_id: uuid.UUID) -> None:
    """The stream does not wait for a turn whose rows are gone: RUN_ERROR not_found, everything released."""
    start_turn(alice_client, conversation_id)
    response = alice_client.get(agui_url(conversation_id))
    try:  # closed on a failure too: a stream left to the garbage collector fails whichever test runs then
        parts = iter(response.streaming_content)
        raw = next(parts).decode()
        assert alice_client.delete(f"/api/conversations/{conversation_id}/").status_code == 204
        raw += "".join(part.decode() for part in parts)
    finally:
        response.close()
    events = [event for _, event in parse_sse(raw)]
    check_sequence(events)
    assert events[-1].type == EventType.RUN_ERROR and events[-1].code == "not_found"
    assert hub.count(conversation_id) == 0


def test_a_stream_past_sse_max_per_user_is_429_too_many_streams_and_a_closed_one_frees_its_place(
    alice_client: APIClient, bob_client: APIClient, alice_scope: Scope, conversation_id: uuid.UUID, settings: Any
) -> None:
    """SSE_MAX_PER_USER 2: a third open stream of alice is 429 too_many_streams (JSON); bob is not counted with her;
    a refused request (409, 404) and a closed stream count no more."""
    from agent_persistence.realtime.sse import open_streams

    settings.AGENT_PERSISTENCE = {**settings.AGENT_PERSISTENCE, "SSE_MAX_PER_USER": 2}
    assert alice_client.get(agui_url(conversation_id)).json()["code"] == "no_turn"  # refused: counts no more
    assert alice_client.get(agui_url(uuid.uuid4())).status_code == 404
    assert open_streams(alice_scope) == 0
    conversation_store().share(alice_scope, conversation_id)
    start_turn(alice_client, conversation_id)
    first, second = alice_client.get(agui_url(conversation_id)), alice_client.get(agui_url(conversation_id))
    try:
        assert (first.status_code, second.status_code) == (200, 200)
        refused = alice_client.get(agui_url(conversation_id))
        assert refused.status_code == 429, refused.content
        assert refused["Content-Type"].startswith("application/json")
        assert refused.json()["code"] == "too_many_streams"
        body = {"threadId": str(conversation_id), "runId": "r", "messages": []}
        assert alice_client.post(agui_url(conversation_id), body, format="json").json()["code"] == "too_many_streams"
        read_stream(bob_client.get(agui_url(conversation_id)))  # another user's place
        first.close()
        assert open_streams(alice_scope) == 1
        events, _ = read_stream(alice_client.get(agui_url(conversation_id)))
        assert events[-1][1].type == EventType.RUN_FINISHED
    finally:
        first.close()
        second.close()
    assert open_streams(alice_scope) == 0


def test_a_reader_whose_conversation_is_unshared_mid_turn_gets_run_error_not_found(
    alice_client: APIClient, bob_client: APIClient, alice_scope: Scope, conversation_id: uuid.UUID, settings: Any
) -> None:
    """The synchronous (WSGI) path: the stream's loop runs the access sweep too; RUN_ERROR not_found within the interval."""
    import time

    settings.AGENT_PERSISTENCE = {
        **settings.AGENT_PERSISTENCE, "WEBSOCKET_ACCESS_CHECK_INTERVAL": 0.2,
        "AGENTS": {**settings.AGENT_PERSISTENCE["AGENTS"], "paced": "tests.realtime.agents.PacedAgent"},
    }
    conversation_store().share(alice_scope, conversation_id)
    response = alice_client.post(f"/api/conversations/{conversation_id}/turns/",
                                 {"content": json.dumps({"chunks": 200, "every": 0.02}), "agent": "paced"}, format="json")
    assert response.status_code == 202, response.data
    stream = bob_client.get(agui_url(conversation_id))
    try:
        parts = iter(stream.streaming_content)
        raw = ""
        while EventType.TEXT_MESSAGE_CONTENT not in [event.type for _, event in parse_sse(raw)]:
            raw += next(parts).decode()
        conversation_store().share(alice_scope, conversation_id, shared=False)
        unshared = time.monotonic()
        for part in parts:
            raw += part.decode()
        elapsed = time.monotonic() - unshared
    finally:
        stream.close()
        alice_client.post(f"/api/conversations/{conversation_id}/turns/cancel/")
    events = [event for _, event in parse_sse(raw)]
    check_sequence(events)
    assert events[-1].type == EventType.RUN_ERROR and events[-1].code == "not_found"
    # RUN_ERROR (not RUN_FINISHED) is what the old code never sent; the bound leaves a loaded machine room,
    # well under the 4 s of turn that were left at the unshare.
    assert elapsed < 4 * 0.2 + 2, elapsed
    assert hub.count(conversation_id) == 0


def test_a_run_agent_input_naming_taken_message_ids_starts_nothing(
    alice_client: APIClient, bob_client: APIClient, bob_scope: Scope, conversation_id: uuid.UUID
) -> None:
    """Issue 21 item 1, the AG-UI half. A run whose last message is a user message the conversation does not hold
    starts a turn with it (issue 24; test_agui_start.py), under that message's id: one taken elsewhere (another user's
    message, the caller's own answer in another conversation) is 409 message_exists, as over REST and the websocket,
    and nothing runs or is written. A last message the conversation holds already (its own question or answer) starts
    nothing: the run streams the conversation's current turn as it is."""
    from agent_persistence.models import Message, Run

    own = finished_turn(alice_client, conversation_id)
    others_conversation = conversation_store().create(bob_scope, agent="echo").id
    others = finished_turn(bob_client, others_conversation)
    question = Message.objects.filter(conversation_id=conversation_id, role="user").values_list("pk", flat=True).first()
    counts = (Message.objects.count(), Run.objects.count())
    others_question = Message.objects.filter(conversation_id=others_conversation, role="user").values_list("pk", flat=True).first()
    for taken in (others["message_id"], str(others_question)):
        body = {"threadId": str(conversation_id), "runId": own["message_id"],
                "messages": [{"id": taken, "role": "user", "content": "again"}]}
        response = alice_client.post(agui_url(conversation_id), body, format="json")
        assert (response.status_code, response.json()["code"]) == (409, "message_exists"), taken
    assert (Message.objects.count(), Run.objects.count()) == counts, "nothing was started or stored"
    for held in (own["message_id"], str(question)):
        body = {"threadId": str(conversation_id), "runId": own["message_id"],
                "messages": [{"id": held, "role": "user", "content": "again"}]}
        pairs, _ = read_stream(alice_client.post(agui_url(conversation_id), body, format="json"))
        events = [event for _, event in pairs]
        check_sequence(events)
        assert events[-1].type == EventType.RUN_FINISHED
        assert {event.message_id for event in events if event.type == EventType.TEXT_MESSAGE_START} == {own["message_id"]}
    assert (Message.objects.count(), Run.objects.count()) == counts, "nothing was started or stored"
