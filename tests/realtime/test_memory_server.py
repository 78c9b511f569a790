"""The in-memory store family serves a whole server: a real uvicorn process with no database at all.

The server (``tests/realtime/memory_server_settings.py``) runs on
``STORES = "agent_persistence.stores.memory.family"`` with Django's dummy
database backend, so any ORM query it made would raise. Over real HTTP and
websockets a client is issued tickets (``POST ws-ticket/``), opens sockets
with them, starts a turn in a new conversation, follows it from a second
socket, and gets the whole answer on both, then a second turn the sockets
switch to (re-checking access); a spent ticket is refused (4403)
and a conversation of another user reads as absent (404), both decided by
the memory family's stores; the access sweep re-reads the followed
conversations (``readable_ids``) every 0.1 s meanwhile.
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
import uuid
from typing import Any, Iterator

import pytest
import websockets

from tests.agents import ANSWER
from tests.realtime.client import StreamClient
from tests.realtime.servers import Server, receive, send, server_env, start_servers

pytestmark = [pytest.mark.timeout(120)]


@pytest.fixture
def server() -> Iterator[Server]:
    env = server_env("", redis=False)
    env["DJANGO_SETTINGS_MODULE"] = "tests.realtime.memory_server_settings"
    env["AP_ACCESS_CHECK_INTERVAL"] = "0.1"  # the access sweep (readable_ids) runs while the sockets are open
    (running,) = start_servers(env, count=1)
    try:
        yield running
    finally:
        log = running.log_path.read_text() if running.log_path.exists() else ""
        running.stop()
        # Anything that reached the ORM raised ImproperlyConfigured (the dummy backend), logged with its traceback.
        assert "ImproperlyConfigured" not in log, log[-5000:]
        assert "access check failed" not in log, log[-5000:]


def post(server: Server, path: str, user: str) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{server.port}/api/{path}", data=b"", method="POST", headers={"X-Test-User": user},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        text = error.read().decode()
        assert error.code < 500, f"{error.code} from {path}: {text[:500]}"
        return error.code, json.loads(text)


def ticket_for(server: Server, user: str, conversation_id: uuid.UUID | None = None) -> str:
    path = f"conversations/{conversation_id}/ws-ticket/" if conversation_id else "ws-ticket/"
    status, body = post(server, path, user)
    assert status == 201, body
    return body["ticket"]


async def close_code(server: Server, conversation_id: uuid.UUID, ticket: str) -> int | None:
    """The code the server closes a socket opened with ``ticket`` with (None: it was accepted)."""
    async with websockets.connect(f"{server.url(conversation_id)}?ticket={ticket}", open_timeout=10) as socket:
        try:
            await send(socket, {"type": "attach"})
            frame = json.loads(await asyncio.wait_for(socket.recv(), 10))
        except websockets.ConnectionClosed as closed:
            return closed.rcvd.code if closed.rcvd else None
    assert frame["type"] == "status", frame
    return None


async def test_a_turn_is_started_followed_and_answered_whole_with_no_database(server: Server) -> None:
    conversation_id = uuid.uuid4()  # new: the socket's start creates it, alice's
    starter_ticket = ticket_for(server, "alice", conversation_id)
    follower_ticket = ticket_for(server, "alice")  # unbound: any conversation alice may read
    url = server.url(conversation_id)
    async with websockets.connect(f"{url}?ticket={starter_ticket}", max_size=None, open_timeout=10) as starter:
        starting = StreamClient()
        await send(starter, {"type": "attach"})
        await receive(starter, starting, until="status")
        await send(starter, {"type": "start", "content": "go", "agent": "scripted"})
        await receive(starter, starting, min_text=len("word00 "))
        async with websockets.connect(f"{url}?ticket={follower_ticket}", max_size=None, open_timeout=10) as follower:
            following = StreamClient()
            await send(follower, following.attach_frame())
            await receive(follower, following, until="final")
            await receive(starter, starting, until="final")
            first = starting.message_id
            assert following.message_id == first
            for client in (starting, following):
                assert client.final_text == ANSWER and client.text == ANSWER and not client.errors, client.frames[-3:]

            # A second turn: both sockets switch to a turn they have not seen (access re-checked) and get it whole.
            await send(starter, {"type": "start", "content": "again", "agent": "scripted"})
            for socket, client in ((starter, starting), (follower, following)):
                await receive(socket, client, until="final")
                assert client.message_id != first and client.final_text == ANSWER and client.text == ANSWER, client.frames[-3:]
                assert not client.errors, client.errors

    # Both tickets were spent by the memory ticket store: presented again, each is refused.
    assert await close_code(server, conversation_id, starter_ticket) == 4403
    assert await close_code(server, conversation_id, follower_ticket) == 4403
    # The memory conversation store decides what another user may see: alice's conversation is absent to bob.
    assert post(server, f"conversations/{conversation_id}/ws-ticket/", "bob")[0] == 404
    assert await close_code(server, conversation_id, ticket_for(server, "bob")) == 4404
    assert await close_code(server, conversation_id, ticket_for(server, "alice", conversation_id)) is None
