"""Two starts of one new conversation id at the same moment, over AG-UI and over the AI SDK endpoint.

One request goes to each of two real uvicorn servers (``tests/realtime/servers.py``) on the test
database, so the two starts are two real transactions in two processes racing to create the
conversation. Exactly one creates it, owned by the caller, with one user message and one run, and
streams the whole answer; the other is ``409 conversation_busy`` and writes nothing. (The websocket's
race is ``tests/realtime/test_start_new_conversation_replicas.py``.)
"""

from __future__ import annotations

import json
import threading
import uuid
from typing import Any, Callable, Iterator

import httpx
import pytest

from agent_persistence.models import Conversation, Message, Run
from tests.agents import ANSWER
from tests.realtime.servers import Server, logged_in_session, running_servers

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180), pytest.mark.e2e]

ROUNDS = 4
CSRF = "newidracesnewidracesnewidracesab"  # any 32 letters: Django compares the cookie with the header


@pytest.fixture
def servers() -> Iterator[list[Server]]:
    with running_servers("recording") as running:
        yield running


def agui(server: Server, conversation_id: uuid.UUID, text: str) -> tuple[str, dict[str, Any]]:
    body = {"threadId": str(conversation_id), "runId": "run-1", "state": {}, "tools": [], "context": [],
            "messages": [{"id": str(uuid.uuid4()), "role": "user", "content": text}],
            "forwardedProps": {"agent": "scripted"}}
    return f"http://127.0.0.1:{server.port}/api/conversations/{conversation_id}/agui/", body


def aisdk(server: Server, conversation_id: uuid.UUID, text: str) -> tuple[str, dict[str, Any]]:
    body = {"id": str(conversation_id), "trigger": "submit-message", "agent": "scripted",
            "messages": [{"id": uuid.uuid4().hex[:16], "role": "user", "parts": [{"type": "text", "text": text}]}]}
    return f"http://127.0.0.1:{server.port}/api/aisdk/chat", body


def streamed_text(kind: str, lines: list[str]) -> str:
    """The answer's text of an AG-UI (TEXT_MESSAGE_CONTENT) or UI message (text-delta) stream."""
    text = []
    for line in lines:
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        event = json.loads(line[6:])
        if kind == "agui" and event.get("type") == "TEXT_MESSAGE_CONTENT":
            text.append(event["delta"])
        elif kind == "aisdk" and event.get("type") == "text-delta":
            text.append(event["delta"])
    return "".join(text)


def post_at_once(requests: list[tuple[str, dict[str, Any]]], session_key: str) -> list[tuple[int, Any]]:
    """POST every request from its own thread at the same moment; (status, error code or the stream's lines)."""
    ready = threading.Barrier(len(requests))
    results: list[tuple[int, Any]] = [(0, None)] * len(requests)
    headers = {"Cookie": f"sessionid={session_key}; csrftoken={CSRF}", "X-CSRFToken": CSRF,
               "Accept": "text/event-stream"}

    def post(index: int, url: str, body: dict[str, Any]) -> None:
        with httpx.Client(timeout=httpx.Timeout(60)) as client:
            ready.wait(30)
            with client.stream("POST", url, json=body, headers=headers) as response:
                if response.status_code == 200:
                    results[index] = (200, list(response.iter_lines()))
                else:
                    results[index] = (response.status_code, json.loads(response.read()).get("code"))

    threads = [threading.Thread(target=post, args=(index, url, body)) for index, (url, body) in enumerate(requests)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(90)
    assert all(status for status, _ in results), results
    return results


@pytest.mark.parametrize("kind, request_for", [("agui", agui), ("aisdk", aisdk)], ids=["agui", "aisdk"])
def test_two_starts_of_one_new_id_on_two_servers_make_one_conversation_and_one_turn(
    servers: list[Server], kind: str, request_for: Callable[[Server, uuid.UUID, str], tuple[str, dict[str, Any]]]
) -> None:
    session_key, user, _ = logged_in_session(f"race-{kind}")
    a, b = servers
    for round_ in range(ROUNDS):
        conversation_id = uuid.uuid4()
        results = post_at_once([request_for(a, conversation_id, "go"), request_for(b, conversation_id, "again")], session_key)
        try:
            assert sorted(status for status, _ in results) == [200, 409], results
            assert [code for status, code in results if status == 409] == ["conversation_busy"]
            [lines] = [lines for status, lines in results if status == 200]
            assert streamed_text(kind, lines) == ANSWER
            conversation = Conversation.objects.get(pk=conversation_id)
            assert (conversation.owner, conversation.tenant) == (str(user.pk), "")
            assert Run.objects.filter(conversation_id=conversation_id).count() == 1
            assert Message.objects.filter(conversation_id=conversation_id, role="user").count() == 1
        except AssertionError as exc:
            raise AssertionError(f"round {round_}: {exc}\n--- {a.name}:\n{a.output()}\n--- {b.name}:\n{b.output()}") from exc
