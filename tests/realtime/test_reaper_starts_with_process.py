"""With ``REAPER_ENABLED`` every replica reaps, whatever it has served: the reaper starts with the process.

Two real uvicorn processes with the reaper on: A produces a turn, B has only served a websocket
follower (or only one HTTP request, and no socket at all) and never started a turn. A is SIGKILLed
mid-answer; B's reaper must resume the turn and finish it.
"""

from __future__ import annotations

import asyncio
import time
import urllib.request
import uuid
from typing import Any, Iterator

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model

from agent_persistence.scope import Scope
from agent_persistence.stores import supervision_store
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

#: Seconds between two sweeps of each server's reaper.
REAPER_INTERVAL = 0.5


@pytest.fixture(params=LAYERS)
def servers(request: pytest.FixtureRequest) -> Iterator[list[Server]]:
    with running_servers(request.param, AP_REAPER_INTERVAL=str(REAPER_INTERVAL)) as running:
        yield running


@pytest.fixture
def session() -> tuple[str, uuid.UUID]:
    key, user, conversation_id = logged_in_session("reaper-alice")
    return key, conversation_id


async def test_a_replica_that_only_served_a_follower_resumes_the_dead_turn(servers: list[Server], session: Any) -> None:
    a, b = servers
    key, conversation_id = session
    async with socket_to(b, conversation_id, key) as follower_socket:
        await send(follower_socket, {"type": "attach"})
        client = await receive(follower_socket, StreamClient(), until="status")
        async with socket_to(a, conversation_id, key, close_timeout=0.5) as producer_socket:
            await send(producer_socket, {"type": "start", "content": "go"})
            await receive(follower_socket, client, min_text=len(ANSWER) // 3)
            await sync_to_async(a.kill)()
        killed = time.monotonic()
        await receive(follower_socket, client, until="final", timeout=20)
        took = time.monotonic() - killed
    assert client.final["stop_reason"] == "completed" and client.final_text == ANSWER, client.final
    assert took < 15, took


async def test_a_replica_that_only_served_one_http_request_resumes_the_dead_turn(servers: list[Server], session: Any) -> None:
    a, b = servers
    key, conversation_id = session
    # B's only traffic: one plain HTTP request (a 404 is enough to be a request it served).
    try:
        await asyncio.to_thread(urllib.request.urlopen, f"http://127.0.0.1:{b.port}/nothing-here/", timeout=10)
    except urllib.error.HTTPError:
        pass
    async with socket_to(a, conversation_id, key, close_timeout=0.5) as producer_socket:
        await send(producer_socket, {"type": "start", "content": "go"})
        await receive(producer_socket, StreamClient(), min_text=len(ANSWER) // 3)
        await sync_to_async(a.kill)()
    scope = Scope(tenant="", user=str((await sync_to_async(get_user_model().objects.get)(username="reaper-alice")).pk))
    deadline = time.monotonic() + 20
    state = None
    while time.monotonic() < deadline:
        state = (await supervision_store().astatus(scope, conversation_id)).state
        if state == "done":
            break
        await asyncio.sleep(0.2)
    assert state == "done", f"the turn is still {state} 20 s after its producer was killed"
