"""A deploy is a hand-off: a server that gets SIGTERM mid-turn hands the turn to a survivor at once.

Two real uvicorn processes (lifespan on, the reaper on, ``SHUTDOWN_GRACE`` short). A follower is
on B and a turn streams on A; A gets SIGTERM. A drains (stops taking turns, lets the turn run
for the grace, then stops it at a step boundary, flushes, releases it as ``handed_off`` at
epoch + 1 and announces it) and exits; B claims the turn and finishes it from the checkpoint.
The follower on B gets the whole answer, each character once, a ``handing_off`` status (with a
layer that spans processes) and then the new producer's frames; the stall (last delta before the
hand-off to the first after it) is printed and stays well below ``DEAD_AFTER``, which a crash
takeover waits for. The tool call the turn made before SIGTERM is not made again.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest
from asgiref.sync import sync_to_async

from agent_persistence.scope import Scope
from agent_persistence.stores import event_store, run_store
from tests.agents import ANSWER, CHUNKS, TOOL_AT
from tests.realtime.client import StreamClient
from tests.realtime.servers import LAYERS, Server, logged_in_session, receive, running_servers, send, socket_to

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]

#: Seconds between two sweeps of each server's reaper (the path without a spanning layer).
REAPER_INTERVAL = 0.25
#: The servers' SHUTDOWN_GRACE: far shorter than what is left of the answer, so the turn is handed off.
GRACE = 0.3
#: DEAD_AFTER of the servers (AP_FAST_TIMINGS): a crash takeover waits at least this long.
DEAD_AFTER = 1.0


#: The layers of :data:`LAYERS` under uvicorn (the ASGI lifespan), and Redis under daphne (Twisted's shutdown).
SERVERS = [
    pytest.param(("recording", "uvicorn"), id="recording"),
    pytest.param(("redis", "uvicorn"), marks=LAYERS[1].marks, id="redis"),
    pytest.param(("redis", "daphne"), marks=LAYERS[1].marks, id="redis-daphne"),
]


@pytest.fixture(params=SERVERS)
def layer_servers(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, list[Server], Path]]:
    layer, program = request.param
    tool_log = tmp_path / "tool.log"
    with running_servers(layer, lifespan="on", program=program, AP_REAPER_INTERVAL=str(REAPER_INTERVAL),
                         AP_SHUTDOWN_GRACE=str(GRACE), AP_TOOL_LOG=str(tool_log)) as running:
        yield layer, running, tool_log


@pytest.fixture
def session() -> tuple[str, uuid.UUID, Scope]:
    key, user, conversation_id = logged_in_session("handoff-alice")
    return key, conversation_id, Scope(tenant="", user=str(user.pk))


async def test_sigterm_hands_the_turn_to_the_other_server_with_no_gap_no_duplicate_and_a_short_stall(
    layer_servers: Any, session: Any
) -> None:
    layer, (a, b), tool_log = layer_servers
    key, conversation_id, scope = session
    arrivals: list[tuple[float, dict[str, Any]]] = []
    async with socket_to(b, conversation_id, key) as follower_socket:
        await send(follower_socket, {"type": "attach"})
        client = await receive(follower_socket, StreamClient(), until="status")
        async with socket_to(a, conversation_id, key, close_timeout=0.5) as producer_socket:
            await send(producer_socket, {"type": "start", "content": "go"})
            # Past the tool call (chunk TOOL_AT), well before the end of the answer.
            while len(client.text) < len("".join(CHUNKS[: TOOL_AT + 5])):
                await receive_timed(follower_socket, client, arrivals)
            sigterm_at = time.monotonic()
            await sync_to_async(a.terminate)()
            exited = asyncio.ensure_future(asyncio.to_thread(timed_wait, a))
            while client.final is None:
                await receive_timed(follower_socket, client, arrivals, timeout=20)
        exit_status, exited_at = await exited
        exited_after = exited_at - sigterm_at

    # uvicorn re-raises the SIGTERM once its (lifespan) shutdown is over, daphne exits 0; the drain said what it did.
    assert exit_status in (0, -signal.SIGTERM), a.output()
    assert "Shutdown: 1 turn(s) handed off (1 with a model call in flight" in a.output(), a.output()
    assert client.final["stop_reason"] == "completed" and client.final_text == ANSWER, client.final
    deltas = [(at, frame) for at, frame in arrivals if frame["type"] == "delta"]
    text = ""
    for _, frame in deltas:  # each character once: every delta starts exactly where the client's text ends
        assert frame["offset"] == len(text), (frame["offset"], len(text))
        text += frame["text"]
    assert text == ANSWER

    statuses = [(frame["state"], frame["epoch"], (frame["run_id"] or "")[-4:], type(frame["run_id"]).__name__)
                for _, frame in arrivals if frame["type"] == "status"]
    handing_off = [index for index, (_, frame) in enumerate(arrivals)
                   if frame["type"] == "status" and frame["state"] == "handing_off"]
    if layer == "redis":  # announced: every follower hears of the hand-off before the new producer's frames
        assert len(handing_off) == 1, statuses
        at = handing_off[0]
        released = arrivals[at][1]
        after = [frame for _, frame in arrivals[at + 1:]]
        resumed = next(frame for frame in after if frame["type"] == "status")
        assert (resumed["state"], resumed["message_id"]) == ("alive", released["message_id"]), after
        assert resumed["epoch"] == released["epoch"] + 1 and resumed["run_id"] != released["run_id"]
        before = [moment for moment, frame in arrivals[:at] if frame["type"] == "delta"]
        first_after = next(moment for moment, frame in arrivals[at:] if frame["type"] == "delta")
        stall = first_after - before[-1]
    else:  # followed through the recording, claimed by B's next sweep
        stall = max(later[0] - earlier[0] for earlier, later in zip(deltas, deltas[1:]) if later[0] > sigterm_at)
    print(f"\nhand-off stall ({layer}): {stall * 1000:.0f} ms (DEAD_AFTER {DEAD_AFTER * 1000:.0f} ms); "
          f"A exited {exited_after:.2f} s after SIGTERM")
    assert stall < DEAD_AFTER, stall

    runs = (await run_store().alist(scope, conversation_id)).items
    assert sorted((run.status, (run.error or {}).get("code")) for run in runs) == [
        ("aborted", "handed_off"), ("completed", None)
    ]
    events = (await event_store().alist(scope, conversation_id, limit=100)).events
    handed_off = [event for event in events if event.type == "handed_off"]
    assert len(handed_off) == 1 and handed_off[0].data["in_flight"] == "model", [event.type for event in events]
    assert "producer_lost" not in [event.type for event in events]
    # The tool call completed before SIGTERM: the resumed producer returned its recorded result.
    assert tool_log.read_text().splitlines() == ["start q1", "done q1"]


def timed_wait(server: Server) -> tuple[int, float]:
    """The server's exit status, and when it exited (``time.monotonic()``)."""
    status = server.wait(30)
    return status, time.monotonic()


async def receive_timed(connection: Any, client: StreamClient, arrivals: list[tuple[float, dict[str, Any]]],
                        timeout: float = 10) -> None:
    """Apply one frame to ``client`` and note when it arrived."""
    frame = json.loads(await asyncio.wait_for(connection.recv(), timeout))
    arrivals.append((time.monotonic(), frame))
    client.apply(frame)



async def test_a_start_on_a_draining_server_is_an_error_frame_shutting_down_and_the_socket_stays_usable() -> None:
    """A socket that reaches a server while it drains (daphne, or a frame in uvicorn's closing window) is told
    with a stable code to go elsewhere; nothing is written."""
    from channels.routing import URLRouter
    from channels.testing import WebsocketCommunicator

    from agent_persistence.realtime.routing import websocket_urlpatterns
    from agent_persistence.runtime import shutdown

    key, user, conversation_id = await sync_to_async(logged_in_session)("draining-alice")
    communicator = WebsocketCommunicator(URLRouter(websocket_urlpatterns), f"/ws/conversations/{conversation_id}/")
    communicator.scope["user"] = user
    connected, _ = await communicator.connect()
    assert connected
    shutdown.stop_taking_turns()
    try:
        await communicator.send_json_to({"type": "start", "content": "go"})
        client = StreamClient()
        while not client.errors:
            client.apply(await communicator.receive_json_from(timeout=10))
        assert client.errors[0]["code"] == "shutting_down", client.errors
        await communicator.send_json_to({"type": "attach"})
        while not client.states:
            client.apply(await communicator.receive_json_from(timeout=10))
        assert client.states[-1] == "idle"
    finally:
        shutdown.resume_taking_turns()
        await communicator.disconnect()
