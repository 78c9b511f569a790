"""Two sockets start one new conversation id at the same moment, one on each of two real server processes.

The servers are uvicorn processes on the test database (SQLite, or PostgreSQL
when DATABASE_URL is set), so the two starts are two real transactions in two
processes. Exactly one creates the conversation and its turn; the other start
gets the normal busy answer (``conversation_busy``), and both sockets follow
the one turn to its exact answer. With Redis between the servers, a tab idle
on the new id on one server follows the turn another tab starts on the other.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any, Iterator

import pytest
from asgiref.sync import sync_to_async

from agent_persistence.models import Conversation, Message, Run
from tests.agents import ANSWER
from tests.realtime.client import StreamClient
from tests.realtime.servers import (
    LAYERS,
    Server,
    logged_in_session,
    receive,
    running_servers,
    send,
    socket_to,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]

ROUNDS = 4




@pytest.fixture(params=LAYERS)
def servers(request: pytest.FixtureRequest) -> Iterator[list[Server]]:
    with running_servers(request.param) as running:
        yield running


async def start_at(server: Server, conversation_id: uuid.UUID, session_key: str, ready: asyncio.Barrier) -> StreamClient:
    """Open a socket to the new id, wait for the other, start, and follow the turn to its final frame."""
    async with socket_to(server, conversation_id, session_key) as socket:
        await send(socket, {"type": "attach"})
        client = await receive(socket, StreamClient(), until="status")
        assert client.states == ["idle"], client.frames
        await ready.wait()
        await send(socket, {"type": "start", "content": "go", "agent": "scripted"})
        await receive(socket, client, until="final", timeout=60)
        # The reply may come after the final frame: wait for it (started, or the refusal).
        while not any(frame["type"] in ("started", "error") for frame in client.frames):
            client.apply(json.loads(await asyncio.wait_for(socket.recv(), 10)))
        return client


async def test_two_sockets_starting_one_new_id_at_once_make_one_conversation_and_one_turn(servers: list[Server]) -> None:
    session_key, user, _ = await sync_to_async(logged_in_session)("race-alice")
    a, b = servers
    try:
        await race(a, b, session_key, user)
    except BaseException as exc:
        raise AssertionError(f"{exc!r}\n--- {a.name}:\n{a.output()}\n--- {b.name}:\n{b.output()}") from exc


async def race(a: Server, b: Server, session_key: str, user: Any) -> None:
    for _ in range(ROUNDS):
        conversation_id = uuid.uuid4()
        ready = asyncio.Barrier(2)
        clients: list[Any] = await asyncio.gather(*(start_at(server, conversation_id, session_key, ready) for server in (a, b)))
        replies = sorted(next(frame["type"] if frame["type"] == "started" else frame["code"]
                              for frame in client.frames if frame["type"] in ("started", "error")) for client in clients)
        assert replies == ["conversation_busy", "started"], [client.frames for client in clients]
        for client in clients:  # the loser follows the winner's turn
            assert client.final_text == ANSWER and client.text == ANSWER
        conversation = await Conversation.objects.aget(pk=conversation_id)
        assert (conversation.owner, conversation.tenant) == (str(user.pk), "")
        assert await Run.objects.filter(conversation_id=conversation_id).acount() == 1
        assert await Message.objects.filter(conversation_id=conversation_id, role="user").acount() == 1
    assert await Conversation.objects.filter(owner=str(user.pk)).acount() == ROUNDS + 1  # and logged_in_session's own


async def test_a_tab_idle_on_a_new_id_follows_the_turn_a_tab_on_the_other_server_starts(
    servers: list[Server], request: pytest.FixtureRequest
) -> None:
    """Pushed through the relay (Redis); following the recording, the idle tab finds the turn at its next attach."""
    session_key, user, _ = await sync_to_async(logged_in_session)("idle-alice")
    a, b = servers
    conversation_id = uuid.uuid4()
    async with socket_to(b, conversation_id, session_key) as idle, socket_to(a, conversation_id, session_key) as starter:
        await send(idle, {"type": "attach"})
        waiting = await receive(idle, StreamClient(), until="status")
        assert waiting.states == ["idle"]
        await send(starter, {"type": "start", "content": "go", "agent": "scripted"})
        started = await receive(starter, StreamClient(), until="final", timeout=60)
        if not a.redis:
            await send(idle, {"type": "attach"})
        followed = await receive(idle, waiting, until="final", timeout=60)
    assert started.final_text == followed.final_text == followed.text == ANSWER
