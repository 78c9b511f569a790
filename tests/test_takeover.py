"""After a takeover every reader names the resumed run: stream status, status frames, done, conversation_updated.

A producer is SIGKILLed mid-answer on server a; a follower on server b sees
the turn go dead and resumes it there. From then on the supervision row, the
``GET .../stream/`` endpoint, the ``status`` frames (the resume's ``alive``
and the final ``done``) and ``conversation_updated`` carry the resumed run's
id and epoch, never the dead run's.
"""

from __future__ import annotations

import uuid
from typing import Any, Iterator

import httpx
import pytest
from asgiref.sync import async_to_sync, sync_to_async

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



@pytest.fixture(params=LAYERS)
def servers(request: pytest.FixtureRequest) -> Iterator[list[Server]]:
    with running_servers(request.param) as running:
        yield running


@pytest.fixture
def session() -> tuple[str, uuid.UUID]:
    key, user, conversation_id = logged_in_session("takeover-alice")
    return key, conversation_id


def test_after_a_takeover_every_frame_and_the_stream_status_name_the_resumed_run(
    servers: list[Server], session: Any
) -> None:
    async_to_sync(take_over)(servers, session)


async def take_over(servers: list[Server], session: Any) -> None:
    a, b = servers
    key, conversation_id = session
    async with socket_to(b, conversation_id, key) as follower_socket:
        await send(follower_socket, {"type": "attach"})
        client = await receive(follower_socket, StreamClient(), until="status")
        async with socket_to(a, conversation_id, key, close_timeout=0.5) as producer_socket:
            await send(producer_socket, {"type": "start", "content": "go"})
            started = await receive(producer_socket, StreamClient(), until="started")
            dead_run = next(frame for frame in started.frames if frame["type"] == "started")
            await receive(follower_socket, client, min_text=len(ANSWER) // 2)
            await sync_to_async(a.kill)()
        while "dead" not in client.states:
            await receive(follower_socket, client, until="status", timeout=20)
        before_resume = len(client.frames)
        await send(follower_socket, {"type": "resume"})
        await receive(follower_socket, client, until="final", timeout=60)
        while not any(frame["type"] == "conversation_updated" for frame in client.frames[before_resume:]):
            await receive(follower_socket, client, until="conversation_updated", timeout=20)

    after = client.frames[before_resume:]
    resumed = next(frame for frame in after if frame["type"] == "resumed")
    assert resumed["run_id"] != dead_run["run_id"] and resumed["epoch"] > dead_run["epoch"]
    statuses = [frame for frame in after if frame["type"] == "status"]
    assert any(frame["state"] == "alive" for frame in statuses), statuses
    assert statuses and all((frame["run_id"], frame["epoch"]) == (resumed["run_id"], resumed["epoch"]) for frame in statuses), statuses
    assert statuses[-1]["state"] == "done"
    updated = [frame for frame in after if frame["type"] == "conversation_updated"]
    assert [frame["run_id"] for frame in updated] == [resumed["run_id"]]
    assert client.text == ANSWER and client.final_text == ANSWER

    cookies = {"sessionid": key}
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{b.port}", cookies=cookies) as http:
        stream = (await http.get(f"/api/conversations/{conversation_id}/stream/")).json()
    assert (stream["state"], stream["run_id"], stream["epoch"]) == ("done", resumed["run_id"], resumed["epoch"])
