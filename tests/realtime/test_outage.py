"""Redis outages under streaming turns: two real uvicorn servers on a private redis-server that the tests stop.

Scenarios (the figures are printed; run with ``-s`` to see them):

1. Redis stopped for 15 s mid-turn, then started again (empty: every group
   membership is gone). The sockets stay open, a socket opened during the
   outage works, followers on the other server keep receiving at the
   recording's pace, and once Redis is back pushes resume at live pace.
2. Redis restarted (stopped and started at once) mid-turn.

In both: every follower ends with exactly the stored answer, and once the
clients have left neither server holds a follower or runs a statement.

The servers run with the default timings (``DEAD_AFTER`` 3 s: safety-net
reads every 1.5 s; ``RECORDING_FLUSH_INTERVAL`` 0.5 s) so live pushes (a
chunk every 50 ms) and reads of the recording are told apart by their gaps.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
import uuid
from contextlib import AsyncExitStack
from typing import Any, Iterator

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model
from django.contrib.sessions.backends.db import SessionStore
from django.db import connection

from agent_persistence.models import Message
from agent_persistence.scope import Scope
from agent_persistence.stores import conversation_store
from tests.realtime.agents import paced_answer
from tests.realtime.client import StreamClient
from tests.realtime.redis_server import RedisServer
from tests.realtime.servers import Server, send, server_env, server_stats, socket_to, start_servers

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(240)]

EVERY = 0.05  # seconds between chunks: live pace
LIVE_GAP = 0.25  # a follower fed live gets deltas closer than this (reads of the recording: 0.5 s, safety net 1.5 s)


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer()
    server.start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def servers(redis_server: RedisServer) -> Iterator[list[Server]]:
    env = server_env(str(connection.settings_dict["NAME"]), redis=True, redis_url=redis_server.url)
    env.pop("AP_FAST_TIMINGS")
    running = start_servers(env)
    try:
        yield running
    finally:
        for server in running:
            server.stop()


@pytest.fixture
def session() -> tuple[str, uuid.UUID]:
    user = get_user_model().objects.create_user("outage-alice")
    store = SessionStore()
    store[SESSION_KEY] = str(user.pk)
    store[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    store[HASH_SESSION_KEY] = user.get_session_auth_hash()
    store.create()
    conversation = conversation_store().create(Scope(tenant="", user=str(user.pk)), agent="paced")
    return store.session_key, conversation.pk


class Reader:
    """Reads a socket's frames into a StreamClient until the final frame, noting when each delta arrived."""

    def __init__(self, name: str, connection: Any) -> None:
        self.name = name
        self.connection = connection
        self.client = StreamClient()
        self.arrivals: list[float] = []
        self.task = asyncio.get_running_loop().create_task(self.read())

    async def read(self) -> None:
        while self.client.final is None:
            frame = json.loads(await self.connection.recv())
            self.client.apply(frame)
            if frame["type"] == "delta":
                self.arrivals.append(time.monotonic())

    def deltas_between(self, start: float, end: float) -> int:
        return sum(start <= arrival < end for arrival in self.arrivals)

    def live_since(self, start: float, streak: int = 8) -> float | None:
        """When ``streak`` deltas in a row first arrived at live pace after ``start``."""
        arrivals = [arrival for arrival in self.arrivals if arrival >= start]
        for first in range(len(arrivals) - streak):
            window = arrivals[first : first + streak + 1]
            if all(later - earlier < LIVE_GAP for earlier, later in zip(window, window[1:])):
                return window[0]
        return None


async def open_reader(name: str, server: Server, conversation_id: uuid.UUID, key: str, stack: Any) -> Reader:
    connection = await stack.enter_async_context(socket_to(server, conversation_id, key))
    await send(connection, {"type": "attach"})
    return Reader(name, connection)


async def wait_for(condition: Any, timeout: float, what: str) -> float:
    began = time.monotonic()
    while not await condition():
        assert time.monotonic() - began < timeout, f"{what}: not within {timeout} s"
        await asyncio.sleep(0.1)
    return time.monotonic() - began


async def nothing_left(servers: list[Server]) -> None:
    """Once every client left: no follower, subscription, socket or relay count, and no statement for 3 s."""

    async def released() -> bool:
        stats = [await sync_to_async(server_stats)(server) for server in servers]
        return all(s["follower_tasks"] == 0 and s["hub_subscriptions"] == 0 and s["sockets"] == 0 and s["relay_followers"] == 0
                   for s in stats)

    await wait_for(released, 15, "the servers released every socket")
    before = [(await sync_to_async(server_stats)(server))["queries"] for server in servers]
    await asyncio.sleep(3)
    after = [(await sync_to_async(server_stats)(server))["queries"] for server in servers]
    assert after == before, (before, after)


def report(scenario: str, readers: list[Reader], expected: str, **figures: Any) -> None:
    for reader in readers:
        text = reader.client.text
        lost = len(expected) - len(text) if expected.startswith(text) else "mismatch"
        print(f"[{scenario}] {reader.name}: {len(text)} of {len(expected)} characters, lost {lost}, "
              f"duplicated {max(0, len(text) - len(expected))}, final equal: {reader.client.final_text == expected}")
    print(f"[{scenario}] " + ", ".join(f"{name} {value}" for name, value in figures.items()))


def stored_answer(conversation_id: uuid.UUID, message_id: str) -> str:
    return Message.objects.get(conversation_id=conversation_id, pk=message_id).content


async def test_redis_stopped_15_s_mid_turn_then_started_again(servers: list[Server], session: Any, redis_server: RedisServer) -> None:
    a, b = servers
    key, conversation_id = session
    chunks = 640  # about 32 s at 50 ms: 4 s before the outage, 15 s of outage, the rest after
    expected = paced_answer(chunks)
    async with AsyncExitStack() as stack:
        starter_socket = await stack.enter_async_context(socket_to(a, conversation_id, key))
        remote = [await open_reader(f"b-follower-{i}", b, conversation_id, key, stack) for i in range(2)]
        await wait_for(lambda: _healthy(b, joined=1), 15, "b's relay in the relays group")
        await send(starter_socket, {"type": "start", "content": json.dumps({"chunks": chunks, "every": EVERY})})
        starter = Reader("a-starter", starter_socket)
        readers = [starter, *remote]
        await wait_for(_async(lambda: len(remote[0].client.text) > 300), 20, "streaming through Redis")
        assert remote[0].live_since(0) is not None, "pushes at live pace before the outage"

        redis_server.stop()
        stopped = time.monotonic()
        await asyncio.sleep(2)
        # A socket opened during the outage works, on either server.
        during = [await open_reader("b-opened-during-outage", b, conversation_id, key, stack),
                  await open_reader("a-opened-during-outage", a, conversation_id, key, stack)]
        readers += during
        await wait_for(_async(lambda: all(reader.client.text for reader in during)), 10, "sockets opened during the outage")
        await asyncio.sleep(max(0.0, stopped + 15 - time.monotonic()))
        outage_deltas = remote[0].deltas_between(stopped + 2, stopped + 14)
        assert not any(reader.task.done() for reader in readers), "every socket stayed open"

        redis_server.start()
        restarted = time.monotonic()
        recovered = await wait_for(lambda: _healthy(b, joined=1), 20, "b's relay back on Redis")
        live_again = await live_pushes_since(remote[0], starter, restarted)
        await asyncio.wait_for(asyncio.gather(*(reader.task for reader in readers)), 60)
    message_id = starter.client.message_id
    stored = await sync_to_async(stored_answer)(conversation_id, message_id)
    report("redis stopped 15 s", readers, expected, deltas_on_b_during_outage=outage_deltas,
           relay_back_after_s=round(recovered, 2),
           live_pushes_after_restart_s=round(live_again - restarted, 2) if live_again else None)
    assert stored == expected
    for reader in readers:
        assert reader.client.text == expected and reader.client.final_text == expected, reader.name
    # Followers on b kept receiving from the recording while Redis was down (every 0.5 s: ~24 reads in 12 s).
    assert outage_deltas >= 8, outage_deltas
    assert live_again is not None and live_again - restarted < 10, "cross-server pushes resumed at live pace"
    await nothing_left(servers)


async def test_redis_restarted_mid_turn(servers: list[Server], session: Any, redis_server: RedisServer) -> None:
    a, b = servers
    key, conversation_id = session
    chunks = 300  # about 15 s
    expected = paced_answer(chunks)
    async with AsyncExitStack() as stack:
        starter_socket = await stack.enter_async_context(socket_to(a, conversation_id, key))
        remote = [await open_reader(f"b-follower-{i}", b, conversation_id, key, stack) for i in range(2)]
        await wait_for(lambda: _healthy(b, joined=1), 15, "b's relay in the relays group")
        await send(starter_socket, {"type": "start", "content": json.dumps({"chunks": chunks, "every": EVERY})})
        starter = Reader("a-starter", starter_socket)
        readers = [starter, *remote]
        await wait_for(_async(lambda: len(remote[0].client.text) > 300), 20, "streaming through Redis")
        redis_server.stop()
        redis_server.start()  # empty: the groups are gone
        restarted = time.monotonic()
        live_again = await live_pushes_since(remote[0], starter, restarted)
        await asyncio.wait_for(asyncio.gather(*(reader.task for reader in readers)), 60)
    stored = await sync_to_async(stored_answer)(conversation_id, starter.client.message_id)
    gaps = [later - earlier for earlier, later in zip(remote[0].arrivals, remote[0].arrivals[1:]) if later > restarted]
    report("redis restarted", readers, expected,
           live_pushes_after_restart_s=round(live_again - restarted, 2) if live_again else None,
           median_gap_after_restart_ms=round(statistics.median(gaps) * 1000) if gaps else None)
    assert stored == expected
    for reader in readers:
        assert reader.client.text == expected and reader.client.final_text == expected, reader.name
    assert live_again is not None and live_again - restarted < 10, "cross-server pushes resumed at live pace"
    await nothing_left(servers)


async def live_pushes_since(follower: Reader, starter: Reader, start: float) -> float | None:
    """When ``follower`` got deltas at live pace again after ``start`` (None if the turn ended or a socket died first)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not follower.task.done() and not starter.task.done():
        live = follower.live_since(start)
        if live is not None:
            return live
        await asyncio.sleep(0.1)
    return None


def _async(condition: Any) -> Any:
    async def check() -> bool:
        return bool(condition())

    return check


async def _healthy(server: Server, joined: int) -> bool:
    stats = await sync_to_async(server_stats)(server)
    return stats["relay_healthy"] and stats["relay_joined"] >= joined

