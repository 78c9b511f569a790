"""Every kind of stream the AI SDK endpoints write, read by the real ``ai`` package as useChat reads it.

``tests/browser/ai_sdk/replay.mjs`` (Node, the page's pinned ``ai``) parses each response body with
``DefaultChatTransport`` (SSE, every chunk validated against the SDK's ``uiMessageChunkSchema``)
and builds the message with ``readUIMessageStream`` (its order rules), from the message the client
holds for a continuation. Covered: a whole answer with a tool, an approval request and its approved
and denied continuations, a client tool answered with ``addToolOutput``'s part, a generic interrupt
(a ``data-interrupt`` part), a failed turn (an ``error`` chunk with its text), a stopped turn
(``abort``), and a resume stream replayed mid-answer.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from rest_framework.test import APIClient

from agent_persistence.runtime.agents import Agent
from agent_persistence.runtime.turn import Turn
from agent_persistence.scope import Scope
from agent_persistence.stores import conversation_store
from tests.agents import ANSWER, CHUNKS, TOOL_AT
from tests.npm import npm_ci

from .test_agui import drained, fast_turns  # noqa: F401 - fixtures
from .test_aisdk import body, post, stream_url, user

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.e2e,  # Node, with the page's pinned ai package
    pytest.mark.skipif(shutil.which("node") is None and not os.environ.get("CI"), reason="Node is not installed"),
]

PAGE = Path(__file__).resolve().parent.parent / "browser" / "ai_sdk"


class ClientToolAgent(Agent):
    """Asks the client to run a tool (a ``client_tool`` interrupt), then says what it returned."""

    async def run(self, turn: Turn) -> None:
        if not turn.state.get("asked"):  # a continuation re-drives the agent with the text so far restored
            turn.stream("Asking the browser. ")
            turn.state["asked"] = True
        output = await turn.interrupt("where", kind="client_tool", payload={
            "tool_call_id": "call-where", "name": "location", "arguments": {"precision": "city"},
        })
        turn.stream(f"You are in {output['city']}.")


class QuestionAgent(Agent):
    """Asks a generic question (a ``generic`` interrupt), then answers with the reply."""

    async def run(self, turn: Turn) -> None:
        if not turn.state.get("asked"):
            turn.stream("One question first. ")
            turn.state["asked"] = True
        reply = await turn.interrupt("colour", payload={"question": "Which colour?"})
        turn.stream(f"Then {reply['colour']}.")


@pytest.fixture(autouse=True)
def agents(settings: Any) -> None:
    extra = {"client_tool": f"{__name__}.ClientToolAgent", "question": f"{__name__}.QuestionAgent"}
    settings.AGENT_PERSISTENCE = {**settings.AGENT_PERSISTENCE, "AGENTS": {**settings.AGENT_PERSISTENCE["AGENTS"], **extra}}


@pytest.fixture(scope="module")
def sdk() -> None:
    npm_ci(PAGE)


def raw_body(response: Any, stop_after: int | None = None) -> str:
    """The response's body as sent (to its end, or its first ``stop_after`` characters of text and the rest unread)."""
    assert response.status_code == 200, getattr(response, "data", None)
    raw = ""
    for part in response.streaming_content:
        raw += part.decode()
        if stop_after is not None and text_length(raw) >= stop_after:
            break
    response.close()
    return raw


def text_length(raw: str) -> int:
    return sum(len(json.loads(line[6:])["delta"]) for line in raw.split("\n") if line.startswith('data: {"type":"text-delta"'))


def replay(*bodies: tuple[str, dict[str, Any] | None]) -> list[dict[str, Any]]:
    """What the real SDK builds of each body (from the message the client holds): [{message, error}]."""
    result = subprocess.run(
        ["node", "replay.mjs"], input=json.dumps([{"body": raw, "message": held} for raw, held in bodies]),
        cwd=PAGE, capture_output=True, text=True, timeout=60, check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


def text(message: dict[str, Any]) -> str:
    return "".join(part["text"] for part in message["parts"] if part["type"] == "text")


def tools(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [part for part in message["parts"] if part["type"].startswith("tool-")]


def test_an_answer_with_a_tool_and_an_approval_flow_are_read_by_the_real_sdk_without_an_error(
    sdk: None, alice_client: APIClient, alice_scope: Scope
) -> None:
    whole = raw_body(post(alice_client, body(uuid.uuid4(), user("go"), agent="scripted")))
    conversation_id = conversation_store().create(alice_scope, agent="approval").pk
    asked = raw_body(post(alice_client, body(conversation_id, user("go"))))
    (built, requested) = replay((whole, None), (asked, None))
    assert built["error"] is None and requested["error"] is None, (built["error"], requested["error"])
    message = built["message"]
    assert text(message) == ANSWER and message["metadata"]["state"] == "done"
    assert [(part["type"], part["state"], part["output"]) for part in tools(message)] == [
        ("tool-lookup", "output-available", {"answer": "result of q1"})]
    held = requested["message"]
    assert text(held) == "".join(CHUNKS[:TOOL_AT])
    (part,) = tools(held)
    assert (part["type"], part["state"], part["input"]) == ("tool-lookup", "approval-requested", {"query": "q1"})
    # addToolApprovalResponse, then the request useChat sends: the message as it holds it now.
    part.update(state="approval-responded", approval={**part["approval"], "approved": True})
    continued = raw_body(post(alice_client, body(conversation_id, user("go"), held)))
    (after,) = replay((continued, held))
    assert after["error"] is None, after["error"]
    assert text(after["message"]) == ANSWER, "the continuation adds exactly the text the client lacked"
    assert [(p["state"], p.get("output")) for p in tools(after["message"])] == [("output-available", {"answer": "result of q1"})]
    assert after["message"]["id"] == held["id"]


def test_a_denied_approval_a_client_tool_and_a_generic_interrupt_as_the_sdk_builds_them(
    sdk: None, alice_client: APIClient, alice_scope: Scope
) -> None:
    denied_id = conversation_store().create(alice_scope, agent="approval").pk
    (asked,) = replay((raw_body(post(alice_client, body(denied_id, user("go")))), None))
    held = asked["message"]
    tools(held)[0].update(state="approval-responded", approval={**tools(held)[0]["approval"], "approved": False, "reason": "no"})
    (denied,) = replay((raw_body(post(alice_client, body(denied_id, held))), held))
    assert denied["error"] is None and [p["state"] for p in tools(denied["message"])] == ["output-denied"]

    client_id = conversation_store().create(alice_scope, agent="client_tool").pk
    (asked,) = replay((raw_body(post(alice_client, body(client_id, user("where am I?")))), None))
    held = asked["message"]
    (part,) = tools(held)
    assert (part["type"], part["state"], part["input"]) == ("tool-location", "input-available", {"precision": "city"})
    part.update(state="output-available", output={"city": "Lyon"})  # addToolOutput
    (answered,) = replay((raw_body(post(alice_client, body(client_id, held))), held))
    assert answered["error"] is None, answered["error"]
    assert text(answered["message"]) == "Asking the browser. You are in Lyon."

    question_id = conversation_store().create(alice_scope, agent="question").pk
    (asked,) = replay((raw_body(post(alice_client, body(question_id, user("go")))), None))
    assert asked["error"] is None
    (data,) = [part for part in asked["message"]["parts"] if part["type"] == "data-interrupt"]
    assert data["data"]["kind"] == "generic" and data["data"]["payload"] == {"question": "Which colour?"}
    assert asked["message"]["metadata"]["interrupts"] == [data["id"]]
    # A generic question is answered through POST interrupts/ (then useChat's resumeStream() follows the turn).
    response = alice_client.post(f"/api/conversations/{question_id}/interrupts/",
                                 {"answers": [{"id": data["id"], "response": {"colour": "blue"}}]}, format="json")
    assert response.status_code in (200, 202), response.content
    deadline = time.monotonic() + 10
    while conversation_store().get(alice_scope, question_id).last_turn_status != "complete":
        assert time.monotonic() < deadline, "the answered turn did not finish"
        time.sleep(0.05)
    assert conversation_store().list_messages(alice_scope, question_id).items[-1].content == "One question first. Then blue."


def test_a_failed_turn_and_a_stopped_turn_are_an_error_and_an_abort_for_the_sdk(
    sdk: None, alice_client: APIClient, alice_scope: Scope, monkeypatch: pytest.MonkeyPatch
) -> None:
    failed = raw_body(post(alice_client, body(uuid.uuid4(), user("go"), agent="failing")))
    monkeypatch.setenv("AP_CHUNK_DELAY", "0.05")
    conversation_id = conversation_store().create(alice_scope, agent="scripted").pk
    response = post(alice_client, body(conversation_id, user("go")))
    parts = iter(response.streaming_content)
    stopped = ""
    while text_length(stopped) < 20:
        stopped += next(parts).decode()
    assert alice_client.post(f"/api/conversations/{conversation_id}/turns/cancel/").status_code == 202
    stopped += "".join(part.decode() for part in parts)
    response.close()
    (error, abort) = replay((failed, None), (stopped, None))
    assert error["error"] == "the model is down" or "model is down" in error["error"], error["error"]
    assert text(error["message"]) == "partial " and error["message"]["metadata"]["error"]["code"]
    assert abort["error"] is None and '"type":"abort"' in stopped
    stored = conversation_store().list_messages(alice_scope, conversation_id).items[-1].content
    assert text(abort["message"]) == stored and 20 <= len(stored) < len(ANSWER)


def test_a_resume_stream_opened_mid_answer_is_the_whole_message_for_the_sdk(
    sdk: None, alice_client: APIClient, alice_scope: Scope, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AP_CHUNK_DELAY", "0.02")
    conversation_id = conversation_store().create(alice_scope, agent="scripted").pk
    first = post(alice_client, body(conversation_id, user("go")))
    raw_body(first, stop_after=100)  # the tab goes away mid-answer
    resumed = raw_body(alice_client.get(stream_url(conversation_id)))
    cut = resumed.index("\n\n") + 2
    (built,) = replay((resumed[:cut] + ": keep-alive\n\n" + resumed[cut:], None))  # the keep-alive comment is skipped
    assert built["error"] is None and text(built["message"]) == ANSWER
