"""The AI SDK endpoints over two real uvicorn servers (``tests/realtime/servers.py``), read with httpx.

- a question posted to one server streams the whole answer; the resume stream (``useChat({ resume: true })``)
  on the other server, opened mid-answer, replays the message from its beginning and ends with exactly the
  answer, on both channel layers (the recording, Redis);
- the producer's server is SIGKILLed mid-answer: the resume stream on the other server takes the turn over
  and ends with exactly the answer (no character lost or doubled, the tool run once);
- 204 when no turn is in flight; another user's chat id is 404, on the stream and on a question.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from agent_persistence.models import Run
from tests.agents import ANSWER
from tests.realtime.servers import LAYERS, Server, logged_in_session, running_servers

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120), pytest.mark.e2e]

CSRF = "aisdkservertestsaisdkservertests"  # any 32 letters: Django compares the cookie with the header


def headers(session_key: str) -> dict[str, str]:
    return {"Cookie": f"sessionid={session_key}; csrftoken={CSRF}", "X-CSRFToken": CSRF}


def chat_url(server: Server) -> str:
    return f"http://127.0.0.1:{server.port}/api/aisdk/chat"


def question(conversation_id: Any, text: str = "go") -> dict[str, Any]:
    return {"id": str(conversation_id), "trigger": "submit-message", "messages": [
        {"id": uuid.uuid4().hex[:16], "role": "user", "parts": [{"type": "text", "text": text}]},
    ]}


class Chunks:
    """One open UI message stream: its response and the chunks read so far."""

    def __init__(self, stack: contextlib.ExitStack, client: httpx.Client, method: str, url: str, key: str,
                 body: Any = None) -> None:
        self.response = stack.enter_context(client.stream(method, url, headers=headers(key), json=body))
        self.lines = self.response.iter_lines()
        self.chunks: list[Any] = []

    @property
    def text(self) -> str:
        return "".join(chunk["delta"] for chunk in self.chunks if chunk != "[DONE]" and chunk["type"] == "text-delta")

    def read(self, *, until_text: int | None = None, timeout: float = 30) -> Chunks:
        """Read to ``[DONE]`` (or until the text holds ``until_text`` characters)."""
        assert self.response.status_code == 200, self.response.read()
        assert self.response.headers["x-vercel-ai-ui-message-stream"] == "v1"
        deadline = time.monotonic() + timeout
        for line in self.lines:
            if line.startswith("data: "):
                data = line[6:]
                self.chunks.append(data if data == "[DONE]" else json.loads(data))
                if data == "[DONE]" or (until_text is not None and len(self.text) >= until_text):
                    return self
            assert time.monotonic() < deadline, f"the stream did not end within {timeout} s: {self.chunks[-3:]}"
        raise AssertionError(f"the stream closed without [DONE]: {self.chunks[-3:]}")

    def close(self) -> None:
        self.response.close()


@contextlib.contextmanager
def http() -> Iterator[tuple[httpx.Client, contextlib.ExitStack]]:
    with httpx.Client(timeout=httpx.Timeout(30)) as client, contextlib.ExitStack() as stack:
        yield client, stack


@pytest.mark.parametrize("layer", LAYERS)
def test_a_resume_stream_on_the_other_server_mid_answer_replays_the_message_once_from_its_beginning(layer: str) -> None:
    key, _, _ = logged_in_session("aisdk-mid")
    conversation_id = uuid.uuid4()
    # The tool call that follows the first third lasts 2 s, so the resume request reaches b mid-answer even on
    # a loaded machine (with the default pace the answer could end first, and the resume stream is then 204).
    with running_servers(layer, AP_TOOL_SECONDS="2", AP_CHUNK_DELAY="0.03") as (a, b), http() as (client, stack):
        live = Chunks(stack, client, "POST", chat_url(a), key, question(conversation_id) | {"agent": "scripted"})
        live.read(until_text=len(ANSWER) // 3)
        live.close()  # the tab reloads: a disconnect never stops the turn
        resumed = Chunks(stack, client, "GET", f"{chat_url(b)}/{conversation_id}/stream", key).read()
        assert resumed.chunks[0]["type"] == "start" and resumed.chunks[0]["messageId"] == live.chunks[0]["messageId"]
        assert resumed.text == ANSWER, "the replay holds every character exactly once"
        assert resumed.chunks[-2]["type"] == "finish" and resumed.chunks[-1] == "[DONE]"
        first = next(chunk for chunk in resumed.chunks if chunk["type"] == "text-delta")
        assert len(first["delta"]) >= len(live.text) // 2, "the catch-up comes whole, not chunk by chunk"
        idle = client.get(f"{chat_url(b)}/{conversation_id}/stream", headers=headers(key))
        assert idle.status_code == 204 and idle.content == b""


def test_after_a_sigkill_of_the_producers_server_the_resume_stream_on_the_other_takes_the_turn_over(tmp_path: Path) -> None:
    key, _, _ = logged_in_session("aisdk-kill")
    conversation_id = uuid.uuid4()
    log = tmp_path / "tools.log"
    with running_servers("recording", AP_TOOL_LOG=str(log), AP_CHUNK_DELAY="0.05") as (a, b), http() as (client, stack):
        live = Chunks(stack, client, "POST", chat_url(a), key, question(conversation_id) | {"agent": "scripted"})
        live.read(until_text=len(ANSWER) // 2)  # past the tool call
        a.kill()
        killed = time.monotonic()
        resumed = Chunks(stack, client, "GET", f"{chat_url(b)}/{conversation_id}/stream", key).read(timeout=30)
        print(f"\nSIGKILL to the end of the resumed answer: {time.monotonic() - killed:.2f} s")
        assert resumed.text == ANSWER, "no character lost or doubled across the takeover"
        assert resumed.chunks[-2]["type"] == "finish"
        assert resumed.chunks[-2]["messageMetadata"]["epoch"] >= 2, "the run of the takeover"
        assert log.read_text().count("done q1") == 1, "the completed tool call is not run again"
        assert Run.objects.filter(conversation_id=conversation_id).count() == 2


def test_the_resume_stream_is_204_before_any_turn_and_another_users_chat_is_404() -> None:
    key, _, conversation_id = logged_in_session("aisdk-alice")
    bob_key, _, bobs = logged_in_session("aisdk-bob")
    with running_servers("recording") as (a, _b), http() as (client, _stack):
        assert client.get(f"{chat_url(a)}/{conversation_id}/stream", headers=headers(key)).status_code == 204
        for url in (f"{chat_url(a)}/{bobs}/stream", f"{chat_url(a)}/{uuid.uuid4()}/stream"):
            response = client.get(url, headers=headers(key))
            assert response.status_code == 404 and response.json()["code"] == "not_found"
        response = client.post(chat_url(a), headers=headers(key), json=question(bobs) | {"agent": "scripted"})
        assert response.status_code == 404 and response.json()["code"] == "not_found"
        response = client.post(chat_url(a), headers=headers(key), json={"id": "chat-1", "messages": []})
        assert response.status_code == 400 and response.json()["code"] == "invalid"
        deep = client.post(chat_url(a), headers={**headers(bob_key), "Content-Type": "application/json"}, content=b"[" * 300)
        assert deep.status_code == 400 and deep.json()["code"] == "malformed_request"
