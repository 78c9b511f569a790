"""One ticket presented at once by two sockets, one to each of two real server processes: exactly one is accepted.

The servers are uvicorn processes on the test database (SQLite, or PostgreSQL
when DATABASE_URL is set); the ticket is spent by one conditional update in
the database, so the two replicas cannot both accept it. The other socket is
closed with 4403.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Iterator

import pytest
import websockets
from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model
from django.db import connection

from agent_persistence.models import WebsocketTicket
from agent_persistence.realtime.tickets import issue_ticket
from agent_persistence.scope import Scope
from agent_persistence.stores import conversation_store
from tests.realtime.servers import Server, server_env, start_servers

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

ROUNDS = 6


@pytest.fixture
def servers() -> Iterator[list[Server]]:
    running = start_servers(server_env(str(connection.settings_dict["NAME"]), redis=False))
    try:
        yield running
    finally:
        for server in running:
            server.stop()


async def present(server: Server, conversation_id: uuid.UUID, ticket: str, go: asyncio.Event) -> str:
    """Open the socket with ``ticket`` once ``go`` is set; "accepted" (a status frame came) or the close code."""
    await go.wait()
    async with websockets.connect(f"{server.url(conversation_id)}?ticket={ticket}", open_timeout=20) as socket:
        try:
            await socket.send(json.dumps({"type": "attach"}))
            frame = json.loads(await asyncio.wait_for(socket.recv(), 20))
            return "accepted" if frame["type"] == "status" else f"frame {frame['type']}"
        except websockets.ConnectionClosed as closed:
            return str(closed.rcvd.code if closed.rcvd else None)


async def test_one_ticket_on_two_replicas_at_once_is_accepted_exactly_once(servers: list[Server]) -> None:
    a, b = servers
    user = await get_user_model().objects.acreate(username="replica-alice")
    scope = Scope("", str(user.pk))
    conversation_id = (await sync_to_async(conversation_store().create)(scope, agent="scripted")).pk
    for _ in range(ROUNDS):
        ticket = (await sync_to_async(issue_ticket)(scope, conversation_id)).ticket
        go = asyncio.Event()
        attempts = [asyncio.create_task(present(server, conversation_id, ticket, go)) for server in (a, b)]
        await asyncio.sleep(0.05)  # both tasks wait at the event: they connect together
        go.set()
        outcomes = sorted(await asyncio.gather(*attempts))
        assert outcomes == ["4403", "accepted"], outcomes
    assert await WebsocketTicket.objects.filter(spent_at__isnull=False).acount() == ROUNDS
