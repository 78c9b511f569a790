"""End to end: two real uvicorn processes on one test database, real websocket clients.

Run twice: with the in-memory channel layer in each server (followers on the
other server follow the recording) and with Redis (updates pushed through the
layer). In every case the client's text and final answer equal the scripted
answer exactly.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from typing import Any, Iterator

import pytest
from asgiref.sync import sync_to_async

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

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]



@pytest.fixture(params=LAYERS)
def servers(request: pytest.FixtureRequest) -> Iterator[list[Server]]:
    with running_servers(request.param) as running:
        yield running


@pytest.fixture
def session() -> tuple[str, uuid.UUID]:
    """A logged-in session of a user, and a conversation of theirs."""
    key, user, conversation_id = logged_in_session("e2e-alice")
    return key, conversation_id


async def test_a_turn_produced_on_a_is_followed_from_b_and_by_a_second_tab(servers: list[Server], session: Any) -> None:
    a, b = servers
    key, conversation_id = session
    async with socket_to(a, conversation_id, key) as producer_socket, socket_to(b, conversation_id, key) as follower_socket:
        await send(follower_socket, {"type": "attach"})
        follower = await receive(follower_socket, StreamClient(), until="status")
        await send(producer_socket, {"type": "start", "content": "go"})
        mid = await receive(follower_socket, follower, min_text=len(ANSWER) // 3)
        async with socket_to(b, conversation_id, key) as tab_socket:
            await send(tab_socket, {"type": "attach"})
            tab, follower, starter = await asyncio.gather(
                receive(tab_socket, StreamClient()), receive(follower_socket, mid), receive(producer_socket, StreamClient())
            )
    for client in (follower, tab, starter):
        assert client.text == ANSWER and client.final_text == ANSWER
    deltas = sum(frame["type"] == "delta" for frame in follower.frames)
    if os.environ.get("REDIS_URL") and a.redis:
        assert deltas > 25  # pushed through the layer, not read from the recording every half second


async def test_a_client_that_disconnects_reattaches_with_its_last_index(servers: list[Server], session: Any) -> None:
    a, b = servers
    key, conversation_id = session
    async with socket_to(a, conversation_id, key) as producer_socket:
        await send(producer_socket, {"type": "start", "content": "go"})
        async with socket_to(b, conversation_id, key) as follower_socket:
            await send(follower_socket, {"type": "attach"})
            client = await receive(follower_socket, StreamClient(), min_text=len(ANSWER) // 3)
        held, seen = len(client.text), len(client.frames)
        await asyncio.sleep(0.3)
        async with socket_to(b, conversation_id, key) as follower_socket:
            await send(follower_socket, client.attach_frame())
            await receive(follower_socket, client)
        await receive(producer_socket, StreamClient())
    assert client.text == ANSWER and client.final_text == ANSWER
    catch_up = [frame for frame in client.frames[seen:] if frame["type"] == "delta"]
    assert catch_up[0]["offset"] == held


async def test_the_producer_killed_mid_answer_and_the_turn_resumed_on_b(servers: list[Server], session: Any) -> None:
    a, b = servers
    key, conversation_id = session
    async with socket_to(b, conversation_id, key) as follower_socket:
        await send(follower_socket, {"type": "attach"})
        client = await receive(follower_socket, StreamClient(), until="status")
        async with socket_to(a, conversation_id, key, close_timeout=0.5) as producer_socket:
            await send(producer_socket, {"type": "start", "content": "go"})
            await receive(follower_socket, client, min_text=len(ANSWER) // 2)
            await sync_to_async(a.kill)()
        while "dead" not in client.states:
            await receive(follower_socket, client, until="status", timeout=10)
        await send(follower_socket, {"type": "resume"})
        await receive(follower_socket, client)
    assert client.text == ANSWER and client.final_text == ANSWER
    assert client.final["stop_reason"] == "completed"
    indexes = [frame["index"] for frame in client.frames if frame["type"] == "delta"]
    assert indexes == sorted(set(indexes))
