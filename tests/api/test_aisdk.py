"""The AI SDK endpoints (``aisdk/chat``, ``aisdk/chat/<id>/stream``) with real producers, read through Django's test client.

The test client is synchronous, so the stream runs through
:func:`agent_persistence.realtime.sse.blocking_event_stream`; the ASGI path over real servers
is ``tests/api/test_aisdk_servers.py`` and, with the real ``ai`` package, ``tests/browser/test_ai_sdk.py``.
Every stream is checked against the UI message stream's rules (:func:`check_chunks`): one
``start``, text deltas inside an open text part, a tool's output after its input, ``[DONE]`` last.
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any, Callable

import pytest
from rest_framework.test import APIClient

from agent_persistence.models import Conversation, Message, Run
from agent_persistence.realtime.delivery import hub
from agent_persistence.scope import Scope
from agent_persistence.stores import conversation_store
from tests.agents import ANSWER, CHUNKS, TOOL_AT

from .test_agui import drained, fast_turns  # noqa: F401 - fixtures

pytestmark = pytest.mark.django_db(transaction=True)

CHAT = "/api/aisdk/chat"


def stream_url(conversation_id: Any) -> str:
    return f"{CHAT}/{conversation_id}/stream"


def user(text: str, message_id: str | None = None) -> dict[str, Any]:
    return {"id": message_id or uuid.uuid4().hex[:16], "role": "user", "parts": [{"type": "text", "text": text}]}


def body(conversation_id: Any, *messages: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"id": str(conversation_id), "messages": list(messages), "trigger": "submit-message", **extra}


def post(client: APIClient, data: Any) -> Any:
    return client.post(CHAT, data, format="json", HTTP_ACCEPT="text/event-stream")


def read_chunks(response: Any, stop: Callable[[list[Any]], bool] | None = None) -> list[Any]:
    """The chunks of a UI message stream response (``"[DONE]"`` as the string), read to its end or until ``stop``."""
    assert response.status_code == 200, getattr(response, "data", None)
    assert response["Content-Type"] == "text/event-stream"
    assert response["X-Vercel-AI-UI-Message-Stream"] == "v1"
    raw, chunks = "", []
    for part in response.streaming_content:
        raw += part.decode()
        *blocks, raw = raw.split("\n\n")
        for block in blocks:
            if block.startswith("data: "):
                data = block[6:]
                chunks.append(data if data == "[DONE]" else json.loads(data))
        if stop is not None and stop(chunks):
            break
    response.close()
    return chunks


def check_chunks(chunks: list[Any], held_calls: tuple[str, ...] = ()) -> None:
    """The stream's rules, as the SDK's processUIMessageStream enforces them (``held_calls``: the client's tool parts)."""
    assert chunks[0]["type"] == "start" and sum(1 for c in chunks if c != "[DONE]" and c["type"] == "start") == 1
    open_text: set[str] = set()
    inputs: set[str] = set(held_calls)
    for chunk in chunks[1:]:
        if chunk == "[DONE]":
            continue
        kind = chunk["type"]
        if kind == "text-start":
            assert chunk["id"] not in open_text
            open_text.add(chunk["id"])
        elif kind in ("text-delta", "text-end"):
            assert chunk["id"] in open_text, chunk
            if kind == "text-end":
                open_text.discard(chunk["id"])
        elif kind == "tool-input-available":
            inputs.add(chunk["toolCallId"])
        elif kind in ("tool-output-available", "tool-output-denied", "tool-approval-request"):
            assert chunk["toolCallId"] in inputs, chunk
    assert not open_text, "every text part is closed"
    assert chunks[-1] == "[DONE]"


def text_of(chunks: list[Any]) -> str:
    return "".join(chunk["delta"] for chunk in chunks if chunk != "[DONE]" and chunk["type"] == "text-delta")


def last(chunks: list[Any]) -> dict[str, Any]:
    return chunks[-2]


def test_a_question_on_a_new_chat_id_creates_the_conversation_of_the_caller_and_streams_the_answer_with_our_ids(
    alice_client: APIClient, alice_scope: Scope
) -> None:
    conversation_id = uuid.uuid4()
    chunks = read_chunks(post(alice_client, body(conversation_id, user("go", "Kq3v8pX2mZ1c"), agent="scripted")))
    check_chunks(chunks)
    assert text_of(chunks) == ANSWER
    conversation = Conversation.objects.get(pk=conversation_id)
    assert (conversation.owner, conversation.agent) == (alice_scope.user, "scripted")
    run = Run.objects.get(conversation_id=conversation_id)
    start, finish = chunks[0], last(chunks)
    assert start["messageId"] == str(run.message_id)
    assert finish["type"] == "finish" and finish["finishReason"] == "stop"
    assert finish["messageMetadata"]["conversationId"] == str(conversation_id)
    assert finish["messageMetadata"]["messageId"] == str(run.message_id)
    assert finish["messageMetadata"]["runId"] == str(run.pk) and finish["messageMetadata"]["state"] == "done"
    tools = [c for c in chunks[:-1] if c["type"].startswith("tool-")]
    assert [c["type"] for c in tools] == ["tool-input-available", "tool-output-available"]
    assert tools[0] == {"type": "tool-input-available", "toolCallId": "call-1", "toolName": "lookup", "input": {"query": "q1"}}
    assert tools[1]["output"] == {"answer": "result of q1"}
    stored = list(Message.objects.filter(conversation_id=conversation_id).order_by("position").values_list("role", "content"))
    assert stored == [("user", "go"), ("assistant", ANSWER)]


def test_the_same_question_again_starts_nothing_and_regenerating_it_is_409_regenerate_unsupported(
    alice_client: APIClient, alice_scope: Scope
) -> None:
    conversation_id = conversation_store().create(alice_scope, agent="scripted").pk
    question = user("go")
    read_chunks(post(alice_client, body(conversation_id, question)))
    runs = Run.objects.count()
    chunks = read_chunks(post(alice_client, body(conversation_id, question)))  # a retry after a lost response
    assert text_of(chunks) == ANSWER and Run.objects.count() == runs
    response = post(alice_client, body(conversation_id, question, trigger="regenerate-message"))
    assert response.status_code == 409 and response.json()["code"] == "regenerate_unsupported"


def test_an_approval_request_is_the_interrupt_and_the_approval_response_continues_the_turn_with_only_what_is_new(
    alice_client: APIClient, alice_scope: Scope
) -> None:
    conversation_id = conversation_store().create(alice_scope, agent="approval").pk
    chunks = read_chunks(post(alice_client, body(conversation_id, user("go"))))
    check_chunks(chunks)
    request = next(c for c in chunks[:-1] if c["type"] == "tool-approval-request")
    assert request["toolCallId"] == "call-1"
    finish = last(chunks)
    assert finish["type"] == "finish" and finish["finishReason"] == "tool-calls"
    assert finish["messageMetadata"]["interrupts"] == [request["approvalId"]]
    before = "".join(CHUNKS[:TOOL_AT])
    assert text_of(chunks) == before
    # What useChat sends after addToolApprovalResponse: the assistant message as it holds it.
    assistant = {"id": chunks[0]["messageId"], "role": "assistant", "parts": [
        {"type": "text", "text": before, "state": "done"},
        {"type": "tool-lookup", "toolCallId": "call-1", "state": "approval-responded", "input": {"query": "q1"},
         "approval": {"id": request["approvalId"], "approved": True}},
    ]}
    chunks = read_chunks(post(alice_client, body(conversation_id, user("go"), assistant)))
    check_chunks(chunks, held_calls=("call-1",))
    assert chunks[0]["messageId"] == assistant["id"]
    assert [c["type"] for c in chunks[:-1] if c["type"].startswith("tool-")] == ["tool-output-available"]
    assert text_of(chunks) == ANSWER[len(before):], "only the text the client lacks"
    assert last(chunks)["type"] == "finish"
    assert Message.objects.get(pk=assistant["id"]).content == ANSWER


def test_a_denied_approval_is_tool_output_denied(alice_client: APIClient, alice_scope: Scope) -> None:
    conversation_id = conversation_store().create(alice_scope, agent="approval").pk
    chunks = read_chunks(post(alice_client, body(conversation_id, user("go"))))
    request = next(c for c in chunks[:-1] if c["type"] == "tool-approval-request")
    assistant = {"id": chunks[0]["messageId"], "role": "assistant", "parts": [
        {"type": "text", "text": text_of(chunks)},
        {"type": "tool-lookup", "toolCallId": "call-1", "state": "approval-responded", "input": {"query": "q1"},
         "approval": {"id": request["approvalId"], "approved": False, "reason": "no"}},
    ]}
    chunks = read_chunks(post(alice_client, body(conversation_id, assistant)))
    check_chunks(chunks, held_calls=("call-1",))
    assert [c for c in chunks[:-1] if c["type"].startswith("tool-")] == [{"type": "tool-output-denied", "toolCallId": "call-1"}]


def test_the_resume_stream_is_204_when_no_turn_is_in_flight_and_404_for_what_the_user_may_not_read(
    alice_client: APIClient, alice_scope: Scope, bob_scope: Scope
) -> None:
    conversation_id = conversation_store().create(alice_scope, agent="scripted").pk
    assert alice_client.get(stream_url(conversation_id)).status_code == 204  # no turn yet
    read_chunks(post(alice_client, body(conversation_id, user("go"))))
    assert alice_client.get(stream_url(conversation_id)).status_code == 204  # the turn ended
    bobs = conversation_store().create(bob_scope, agent="scripted").pk
    for target in (bobs, uuid.uuid4(), "not-a-uuid"):
        response = alice_client.get(stream_url(target))
        assert response.status_code == 404 and response.json()["code"] == "not_found", target


def test_a_question_on_another_users_conversation_is_404_and_writes_nothing(
    alice_client: APIClient, bob_scope: Scope
) -> None:
    bobs = conversation_store().create(bob_scope, agent="scripted").pk
    response = post(alice_client, body(bobs, user("go"), agent="scripted"))
    assert response.status_code == 404 and response.json()["code"] == "not_found", response.json()
    # Without an agent it answers as a new id without one does (POST turns/'s rule): nothing tells them apart.
    blind, fresh = post(alice_client, body(bobs, user("go"))), post(alice_client, body(uuid.uuid4(), user("go")))
    assert (blind.status_code, blind.json()["code"]) == (fresh.status_code, fresh.json()["code"]) == (400, "unknown_agent")
    assert not Message.objects.filter(conversation_id=bobs).exists()


@pytest.mark.parametrize(("data", "field", "code"), [
    ([], "body", "invalid"),
    ({"messages": []}, "id", "invalid"),
    ({"id": "chat-1", "messages": [{"id": "m", "role": "user", "parts": []}]}, "id", "invalid"),
    ({"id": "{id}", "messages": [{"id": "m", "role": "user", "parts": [{"type": "text", "text": "x"}]}], "trigger": "resume-stream"},
     "trigger", "unsupported_trigger"),
    ({"id": "{id}", "messages": []}, "messages", "invalid"),
    ({"id": "{id}", "messages": "hi"}, "messages", "invalid"),
    ({"id": "{id}", "messages": [{"role": "user", "parts": []}]}, "messages.0", "invalid"),
    ({"id": "{id}", "messages": [{"id": "m", "role": "user", "parts": [1]}]}, "messages.0.parts", "invalid"),
    ({"id": "{id}", "messages": [{"id": "m", "role": "user", "parts": []}]}, "messages.0.parts", "invalid"),
    ({"id": "{id}", "messages": [{"id": "m", "role": "user", "parts": [{"type": "text", "text": 5}]}]}, "messages.0.parts", "invalid"),
    ({"id": "{id}", "messages": [{"id": "m", "role": "system", "parts": [{"type": "text", "text": "x"}]}]}, "messages.0.role", "invalid"),
    ({"id": "{id}", "agent": 3, "messages": [{"id": "m", "role": "user", "parts": [{"type": "text", "text": "x"}]}]}, "agent", "invalid"),
    ({"id": "{id}", "messages": [{"id": "m", "role": "assistant", "parts": [
        {"type": "tool-x", "toolCallId": "c", "state": "approval-responded", "approval": {"id": "a"}}]}]},
     "messages.0.parts.0.approval", "invalid"),
])
def test_hostile_bodies_are_400_with_a_stable_code_and_write_nothing(
    alice_client: APIClient, data: Any, field: str, code: str
) -> None:
    conversation_id = str(uuid.uuid4())
    if isinstance(data, dict):
        data = {key: (conversation_id if value == "{id}" else value) for key, value in data.items()}
    response = post(alice_client, data)
    assert response.status_code == 400, response.content
    assert response.json()["code"] == code and response.json()["details"]["field"] == field, response.json()
    assert not Conversation.objects.exists()


@pytest.mark.parametrize(("raw", "code"), [
    ('{"id": "x", "messages": [{"id": "m", "role": "user", "parts": [{"type": "text", "text": "\\ud800"}]}]}', "invalid"),
    ('{"id": "x", "messages": [{"id": "m", "role": "user", "parts": [{"type": "text", "text": "a\\u0000"}]}]}', "invalid"),
    ("[" * 200 + "]" * 200, "malformed_request"),
    ("{not json", "malformed_request"),
])
def test_bodies_the_json_policy_refuses_are_400_before_anything_is_read(alice_client: APIClient, raw: str, code: str) -> None:
    response = alice_client.generic("POST", CHAT, raw, content_type="application/json")
    assert response.status_code == 400 and response.json()["code"] == code, response.content
    assert not Conversation.objects.exists()


def test_anonymous_requests_are_refused(client_for: Callable[[Any], APIClient]) -> None:
    anonymous = client_for(None)
    assert post(anonymous, body(uuid.uuid4(), user("go"))).status_code in (401, 403)
    assert anonymous.get(stream_url(uuid.uuid4())).status_code in (401, 403)


ROOT = Path(__file__).resolve().parents[2]


def test_the_how_tos_page_and_build_script_are_the_files_the_browser_test_runs() -> None:
    """docs/howto/vercel-ai-sdk.md shows tests/browser/ai_sdk/app.tsx and build.mjs verbatim (a marker names each)."""
    text = (ROOT / "docs" / "howto" / "vercel-ai-sdk.md").read_text()
    shown = dict(re.findall(r"<!-- (tests/browser/ai_sdk/[\w.]+) -->\n```\w*\n(.*?)^```$", text, re.S | re.M))
    assert sorted(shown) == ["tests/browser/ai_sdk/app.tsx", "tests/browser/ai_sdk/build.mjs"]
    for name, block in shown.items():
        assert block == (ROOT / name).read_text(), f"the how-to's block differs from {name}"


@pytest.mark.parametrize("path", [f"{CHAT}/", f"{CHAT}/a%2Fb/stream", f"{CHAT}/{uuid.uuid4()}/stream/", f"{CHAT}/x/y"])
def test_other_paths_under_the_chat_are_the_apis_json_404_not_a_redirect(alice_client: APIClient, path: str) -> None:
    for method in ("get", "post"):
        response = getattr(alice_client, method)(path, {}, format="json")
        assert response.status_code == 404 and response.json()["code"] == "not_found", (method, path, response.status_code)


def test_over_sse_max_per_user_a_request_is_429_too_many_streams_before_anything_is_read(
    alice_client: APIClient, settings: Any
) -> None:
    """The cap is AG-UI's and this endpoint's together; a user at it writes nothing and costs no query."""
    settings.AGENT_PERSISTENCE = {**settings.AGENT_PERSISTENCE, "SSE_MAX_PER_USER": 0}
    response = post(alice_client, body(uuid.uuid4(), user("go"), agent="scripted"))
    assert response.status_code == 429 and response.json()["code"] == "too_many_streams"
    assert not Conversation.objects.exists()


def test_a_reader_whose_conversation_is_unshared_mid_turn_gets_an_error_chunk_not_found(
    alice_client: APIClient, alice_scope: Scope, bob_user: Any, client_for: Callable[[Any], APIClient], settings: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """bob streams alice's shared conversation (the resume stream); alice unshares it: the stream ends with not_found."""
    settings.AGENT_PERSISTENCE = {**settings.AGENT_PERSISTENCE, "WEBSOCKET_ACCESS_CHECK_INTERVAL": 0.2}
    monkeypatch.setenv("AP_CHUNK_DELAY", "0.05")
    conversation_id = conversation_store().create(alice_scope, agent="scripted", shared=True).pk
    started = post(alice_client, body(conversation_id, user("go")))  # the turn starts; alice's stream is left unread
    unshared: list[bool] = []

    def unshare_once_text_arrives(chunks: list[Any]) -> bool:
        if len(text_of(chunks)) > 20 and not unshared:
            conversation_store().share(alice_scope, conversation_id, shared=False)
            unshared.append(True)
        return False

    chunks = read_chunks(client_for(bob_user).get(stream_url(conversation_id)), stop=unshare_once_text_arrives)
    started.close()
    assert unshared, "bob's stream showed the turn"
    assert chunks[-2]["type"] == "error" and chunks[-3]["messageMetadata"]["error"]["code"] == "not_found", chunks[-3:]
    assert len(text_of(chunks)) < len(ANSWER), "no text after access was lost"


def test_a_failure_inside_the_stream_ends_the_message_with_an_error_chunk_then_done_and_releases_everything(
    alice_client: APIClient, alice_scope: Scope, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Fault injection: translating a frame raises; the client gets internal_error then [DONE], the log the traceback."""
    from agent_persistence.aisdk.chunks import Translator
    from agent_persistence.realtime.sse import open_streams

    def broken(self: Translator, text: str) -> None:
        raise RuntimeError("a bug in the translation")

    conversation_id = conversation_store().create(alice_scope, agent="scripted").pk
    monkeypatch.setattr(Translator, "text", broken)
    with caplog.at_level("ERROR", logger="agent_persistence.aisdk.streams"):
        chunks = read_chunks(post(alice_client, body(conversation_id, user("go"))))
    check_chunks(chunks)
    assert last(chunks) == {"type": "error", "errorText": "The server could not go on streaming this turn."}
    assert chunks[-3]["messageMetadata"]["error"]["code"] == "internal_error"
    assert "a bug in the translation" not in json.dumps(chunks)
    record = next(r for r in caplog.records if r.exc_info and "a bug in the translation" in str(r.exc_info[1]))
    assert record.name == "agent_persistence.aisdk.streams"
    assert record.getMessage().startswith("The AI SDK stream of conversation")
    assert hub.count(conversation_id) == 0 and open_streams(alice_scope) == 0


def test_a_silent_stretch_of_the_turn_gets_keep_alive_comments_between_whole_chunks(
    alice_client: APIClient, alice_scope: Scope, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the tool runs nothing is sent: an SSE comment every KEEP_ALIVE seconds; the message around it is whole."""
    monkeypatch.setattr("agent_persistence.realtime.sse.KEEP_ALIVE", 0.05)
    monkeypatch.setenv("AP_TOOL_SECONDS", "0.5")
    conversation_id = conversation_store().create(alice_scope, agent="scripted").pk
    response = post(alice_client, body(conversation_id, user("go")))
    raw = "".join(part.decode() for part in response.streaming_content)
    response.close()
    assert raw.count(": keep-alive\n\n") >= 3, "a comment per KEEP_ALIVE of the tool's half second"
    assert raw.endswith("data: [DONE]\n\n")
    chunks = [json.loads(block[6:]) for block in raw.split("\n\n") if block.startswith("data: {")]
    assert text_of(chunks) == ANSWER and chunks[-1]["type"] == "finish"
    assert hub.count(conversation_id) == 0
