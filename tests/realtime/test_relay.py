"""The relay on a real Redis (a private redis-server that the tests stop and restart) and idle sockets on a spanning layer.

- following never waits on the layer, and a layer that is down delays nothing;
- the relay joins its groups once Redis answers, and joins them again after a
  restart that lost them (found by its probe), so pushes from other processes
  resume;
- counts go back to zero and the groups are left when the sockets go;
- sockets of a conversation with no turn running cost no database statement
  while the relay covers them, and wake on a layer message.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any, Iterator

import pytest
from asgiref.sync import sync_to_async
from channels_redis.core import RedisChannelLayer
from django.contrib.auth import get_user_model

from agent_persistence.realtime import delivery
from agent_persistence.realtime.delivery import Relay, hub, relay
from agent_persistence.realtime.groups import UPDATE_TYPE, conversation_group
from tests.realtime.instrument import QueryCounter
from tests.realtime.redis_server import RedisServer
from tests.realtime.test_consumer import connect, make_conversation

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(90)]


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer()
    try:
        yield server
    finally:
        server.close()


def redis_layer(server: RedisServer) -> RedisChannelLayer:
    return RedisChannelLayer(hosts=[{"address": server.url, "socket_timeout": 30}])


async def wait_until(condition: Any, timeout: float) -> float:
    """Seconds until ``condition()`` held; fails after ``timeout``."""
    began = time.monotonic()
    while not condition():
        assert time.monotonic() - began < timeout, "condition not met in time"
        await asyncio.sleep(0.05)
    return time.monotonic() - began


def update(conversation_id: uuid.UUID, message_id: uuid.UUID, index: int, offset: int, text: str) -> dict[str, Any]:
    """A group message as another server's group sender sends it."""
    payload = {"kind": "delta", "message_id": str(message_id), "run_id": str(uuid.uuid4()), "epoch": 1, "index": index,
               "offset": offset, "text": text, "tool_calls": None}
    return {"type": UPDATE_TYPE, "origin": "another-server", "conversation_id": str(conversation_id), "payload": payload}


async def pushed_through(sender: RedisChannelLayer, conversation_id: uuid.UUID, received: list[Any], timeout: float) -> float:
    """Send updates from "another server" until one reaches the hub here; the seconds it took."""
    began = time.monotonic()
    index = 0
    while not any(payload.get("kind") == "delta" for payload in received):
        assert time.monotonic() - began < timeout, "no push came through"
        index += 1
        try:
            await sender.group_send(conversation_group(conversation_id), update(conversation_id, uuid.uuid4(), index, 0, "x"))
        except Exception:  # noqa: BLE001 - Redis is still starting
            pass
        await asyncio.sleep(0.1)
    return time.monotonic() - began


async def test_following_while_redis_is_down_waits_for_nothing_and_joins_when_it_is_back(redis_server: RedisServer) -> None:
    conversation_id = uuid.uuid4()
    received: list[Any] = []
    subscription = hub.subscribe(conversation_id, received.append)
    layer = redis_layer(redis_server)
    relay_ = Relay(layer)
    try:
        began = time.monotonic()
        relay_.follow(conversation_id)  # Redis is not running yet
        assert time.monotonic() - began < 0.1
        await asyncio.sleep(1.5)
        assert not relay_.covers(conversation_id)
        redis_server.start()
        await wait_until(lambda: relay_.covers(conversation_id), 10)
        await pushed_through(redis_layer(redis_server), conversation_id, received, 10)
        assert {"kind": "layer"} in received  # the followers were told the coverage changed
    finally:
        hub.unsubscribe(subscription)
        await relay_.close()


async def test_after_a_redis_restart_the_relay_joins_its_groups_again_and_pushes_resume(redis_server: RedisServer) -> None:
    redis_server.start()
    conversation_id = uuid.uuid4()
    received: list[Any] = []
    subscription = hub.subscribe(conversation_id, received.append)
    relay_ = Relay(redis_layer(redis_server))
    try:
        relay_.follow(conversation_id)
        await wait_until(lambda: relay_.covers(conversation_id), 10)
        await pushed_through(redis_layer(redis_server), conversation_id, received, 10)
        redis_server.stop()
        redis_server.start()  # a restart without persistence: every group membership is gone
        received.clear()
        recovery = await pushed_through(redis_layer(redis_server), conversation_id, received, 20)
        # Within the probe's timeout (or at once, when the restart broke a receive), not never.
        assert recovery < delivery.PROBE_TIMEOUT + 5, recovery
        assert relay_.covers(conversation_id)
    finally:
        hub.unsubscribe(subscription)
        await relay_.close()


async def test_counts_return_to_zero_and_the_group_is_left_when_the_sockets_go(redis_server: RedisServer) -> None:
    redis_server.start()
    conversation_id = uuid.uuid4()
    layer = redis_layer(redis_server)
    relay_ = Relay(layer)
    try:
        for _ in range(3):
            relay_.follow(conversation_id)
        await wait_until(lambda: relay_.covers(conversation_id), 10)
        for _ in range(3):
            relay_.unfollow(conversation_id)
        await wait_until(lambda: not relay_.joined, 5)
        assert relay_.followers == {}
        connection = layer.connection(layer.consistent_hash(conversation_group(conversation_id)))
        assert await connection.zcard(layer._group_key(conversation_group(conversation_id))) == 0
    finally:
        await relay_.close()


async def test_idle_sockets_on_a_spanning_layer_read_nothing_and_wake_on_a_layer_message(
    redis_server: RedisServer, settings: Any
) -> None:
    """20 sockets of a conversation with no turn: once the relay covers it, not one statement in 3 s
    (on main they read every DEAD_AFTER / 2); a turn pushed by another server reaches them all."""
    redis_server.start()
    settings.CHANNEL_LAYERS = {
        "default": {"BACKEND": "channels_redis.core.RedisChannelLayer", "CONFIG": {"hosts": [{"address": redis_server.url}]}}
    }
    settings.AGENT_PERSISTENCE = {**settings.AGENT_PERSISTENCE, "WEBSOCKET_ACCESS_CHECK_INTERVAL": 600}
    user = await sync_to_async(get_user_model().objects.create_user)("relay-alice")
    conversation_id = await sync_to_async(make_conversation)(user)
    communicators = []
    for _ in range(20):
        communicator = await connect(conversation_id, user)
        await communicator.send_json_to({"type": "attach"})
        assert (await communicator.receive_json_from(timeout=10))["state"] == "idle"
        communicators.append(communicator)
    await wait_until(lambda: relay().covers(conversation_id), 10)
    await asyncio.sleep(2)  # the read each follower makes when told it is covered (slow on a loaded machine)
    counter = QueryCounter().install()
    try:
        await asyncio.sleep(3)
        assert counter.count == 0
    finally:
        counter.uninstall()
    message_id = uuid.uuid4()
    other_server = redis_layer(redis_server)
    await other_server.group_send(conversation_group(conversation_id), update(conversation_id, message_id, 1, 0, "Hello"))
    for communicator in communicators:
        status = await communicator.receive_json_from(timeout=10)
        assert status["type"] == "status" and status["state"] == "alive" and status["message_id"] == str(message_id)
        delta = await communicator.receive_json_from(timeout=10)
        assert delta["type"] == "delta" and delta["text"] == "Hello"
    for communicator in communicators:
        await communicator.disconnect()
    await wait_until(lambda: not relay().followers, 5)
    await relay().close()
