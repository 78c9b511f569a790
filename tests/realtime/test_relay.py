"""The relay on a real Redis (a private redis-server that the tests stop and restart) and idle sockets on a spanning layer.

- following never waits on the layer, and a layer that is down delays nothing;
- the relay joins the relays' group once Redis answers, and joins it again
  after a restart that lost it (found by its probe), so pushes from other
  processes resume;
- a conversation followed while the relay is up is covered at once (no group
  of its own to join), and only followed conversations reach the hub;
- a message of another server that never arrived (dropped as from a full
  channel: its sequence is skipped) makes the followers read, as does a first
  message that is not its sender's first; a process's own batches do not
  reach its hub but prove that the layer delivers;
- counts go back to zero; the relay is one member of one group, whatever its
  sockets follow;
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
from agent_persistence.realtime.groups import BATCH_TYPE, RELAYS_GROUP, conversation_group
from agent_persistence.runtime.hooks import StreamUpdate
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


class OtherServer:
    """Sends to the relays' group what another server's group sender sends: numbered batches."""

    def __init__(self, layer: RedisChannelLayer) -> None:
        self.layer = layer
        self.sender_id = uuid.uuid4().hex
        self.sequence = 0

    def batch(self, updates: list[tuple[uuid.UUID, dict[str, Any]]]) -> dict[str, Any]:
        message = {"type": BATCH_TYPE, "origin": "another-server", "sender": self.sender_id, "sequence": self.sequence,
                   "updates": [{"conversation_id": str(conversation_id), "payload": payload} for conversation_id, payload in updates]}
        self.sequence += 1
        return message

    async def send(self, *updates: tuple[uuid.UUID, dict[str, Any]], layer: RedisChannelLayer | None = None) -> None:
        await (layer or self.layer).group_send(RELAYS_GROUP, self.batch(list(updates)))


def delta(message_id: uuid.UUID, index: int, offset: int, text: str) -> dict[str, Any]:
    return {"kind": "delta", "message_id": str(message_id), "run_id": str(uuid.uuid4()), "epoch": 1, "index": index,
            "offset": offset, "text": text, "tool_calls": None}


async def pushed_through(sender: RedisChannelLayer, conversation_id: uuid.UUID, received: list[Any], timeout: float) -> float:
    """Send updates from "another server" until one reaches the hub here; the seconds it took."""
    began = time.monotonic()
    other = OtherServer(sender)
    index = 0
    while not any(payload.get("kind") == "delta" for payload in received):
        assert time.monotonic() - began < timeout, "no push came through"
        index += 1
        try:
            await other.send((conversation_id, delta(uuid.uuid4(), index, 0, "x")))
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


async def test_counts_return_to_zero_and_the_relay_is_one_member_of_one_group(redis_server: RedisServer) -> None:
    redis_server.start()
    conversations = [uuid.uuid4() for _ in range(3)]
    layer = redis_layer(redis_server)
    relay_ = Relay(layer)

    async def members(group: str) -> int:
        return await layer.connection(layer.consistent_hash(group)).zcard(layer._group_key(group))

    try:
        for conversation_id in conversations:
            for _ in range(3):
                relay_.follow(conversation_id)
        await wait_until(lambda: all(relay_.covers(conversation_id) for conversation_id in conversations), 10)
        assert await members(RELAYS_GROUP) == 1
        assert [await members(conversation_group(conversation_id)) for conversation_id in conversations] == [0, 0, 0]
        for conversation_id in conversations:
            for _ in range(3):
                relay_.unfollow(conversation_id)
        assert relay_.followers == {}
        await asyncio.sleep(delivery.PROBE_INTERVAL * 1.5)
        assert await members(RELAYS_GROUP) == 1  # still the one member: the next socket is covered at once
    finally:
        await relay_.close()


async def test_a_conversation_followed_while_the_relay_is_up_is_covered_at_once_and_only_followed_ones_reach_the_hub(
    redis_server: RedisServer,
) -> None:
    redis_server.start()
    first, second, unfollowed = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    received: dict[uuid.UUID, list[Any]] = {first: [], second: [], unfollowed: []}
    subscriptions = [hub.subscribe(conversation_id, payloads.append) for conversation_id, payloads in received.items()]
    relay_ = Relay(redis_layer(redis_server))
    other = OtherServer(redis_layer(redis_server))
    try:
        relay_.follow(first)
        await wait_until(lambda: relay_.covers(first), 10)
        relay_.follow(second)
        assert relay_.covers(second)  # no group to join, nothing to wait for
        message_id = uuid.uuid4()
        await other.send((second, delta(message_id, 1, 0, "Hi")), (unfollowed, delta(message_id, 1, 0, "no")),
                         (first, delta(message_id, 1, 0, "Yo")))
        await wait_until(lambda: received[first] and received[second], 5)
        await asyncio.sleep(0.2)
        assert [payload["text"] for payload in received[second]] == ["Hi"]
        assert [payload["text"] for payload in received[first] if payload["kind"] == "delta"] == ["Yo"]
        assert received[unfollowed] == []  # a hub subscriber, but no socket of this relay follows it
        assert all(payload["relayed"] for payload in received[second])  # followers tell them from their own producers'
    finally:
        for subscription in subscriptions:
            hub.unsubscribe(subscription)
        await relay_.close()


async def test_a_message_dropped_by_redis_makes_the_followers_read(redis_server: RedisServer) -> None:
    """A seal dropped as channels-redis drops a message to a full channel (a sender whose capacity is 0):
    the next message of that sender shows the gap, and every follower here is told to read (``layer``)."""
    redis_server.start()
    conversation_id, quiet = uuid.uuid4(), uuid.uuid4()
    received: list[Any] = []
    others: list[Any] = []
    subscriptions = [hub.subscribe(conversation_id, received.append), hub.subscribe(quiet, others.append)]
    relay_ = Relay(redis_layer(redis_server))
    other = OtherServer(redis_layer(redis_server))
    try:
        relay_.follow(conversation_id)
        relay_.follow(quiet)
        await wait_until(lambda: relay_.covers(conversation_id), 10)
        await wait_until(lambda: {"kind": "layer"} in others, 5)  # told once when the relay came up
        received.clear()
        others.clear()
        message_id = uuid.uuid4()
        await other.send((conversation_id, delta(message_id, 1, 0, "Hel")))
        await wait_until(lambda: received, 5)
        await asyncio.sleep(0.3)
        assert received == [delta_of(received[0])] and others == []  # in sequence: nobody reads
        full = RedisChannelLayer(hosts=[{"address": redis_server.url}], capacity=0)
        await other.send((conversation_id, {"kind": "sealed", "message_id": str(message_id)}), layer=full)  # dropped
        await asyncio.sleep(0.3)
        assert len(received) == 1
        await other.send((uuid.uuid4(), delta(uuid.uuid4(), 1, 0, "elsewhere")))  # the sender's next message
        await wait_until(lambda: {"kind": "layer"} in received and {"kind": "layer"} in others, 5)
        assert relay_.losses == 1 and relay_.covers(conversation_id)
    finally:
        for subscription in subscriptions:
            hub.unsubscribe(subscription)
        await relay_.close()


def delta_of(payload: dict[str, Any]) -> dict[str, Any]:
    assert payload["kind"] == "delta"
    return payload


async def test_a_first_message_that_is_not_its_senders_first_makes_the_followers_read(redis_server: RedisServer) -> None:
    redis_server.start()
    conversation_id = uuid.uuid4()
    received: list[Any] = []
    subscription = hub.subscribe(conversation_id, received.append)
    relay_ = Relay(redis_layer(redis_server))
    other = OtherServer(redis_layer(redis_server))
    try:
        relay_.follow(conversation_id)
        await wait_until(lambda: relay_.covers(conversation_id), 10)
        await wait_until(lambda: {"kind": "layer"} in received, 5)
        received.clear()
        other.sequence = 7  # its messages 0 to 6 went before this relay joined
        await other.send((conversation_id, delta(uuid.uuid4(), 1, 0, "late")))
        await wait_until(lambda: {"kind": "layer"} in received, 5)
        assert relay_.losses == 1
    finally:
        hub.unsubscribe(subscription)
        await relay_.close()


async def test_a_process_own_batches_skip_its_hub_and_prove_delivery(redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """The hub served this process's updates already; their coming back through Redis counts as a probe."""
    redis_server.start()
    layer = redis_layer(redis_server)
    monkeypatch.setattr(delivery, "get_channel_layer", lambda: layer)
    monkeypatch.setattr(delivery, "layer_spans_processes", lambda layer=None: True)
    conversation_id = uuid.uuid4()
    relay_ = Relay(layer)
    received: list[Any] = []
    try:
        relay_.follow(conversation_id)
        await wait_until(lambda: relay_.covers(conversation_id), 10)
        subscription = hub.subscribe(conversation_id, received.append)
        try:
            probed = relay_.last_probe_back
            update = StreamUpdate(conversation_id, uuid.uuid4(), uuid.uuid4(), 1, 1, "mine", None)
            delivery.on_stream(update)
            await wait_until(lambda: relay_.last_probe_back > probed, 0.9)  # before the next probe (1 s)
            await asyncio.sleep(0.2)
            assert [payload["text"] for payload in received] == ["mine"]  # the hub's, once
        finally:
            hub.unsubscribe(subscription)
    finally:
        await relay_.close()
        sender = delivery._senders.pop(asyncio.get_running_loop(), None)
        if sender is not None:
            sender.task.cancel()


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
    await OtherServer(other_server).send((conversation_id, delta(message_id, 1, 0, "Hello")))
    for communicator in communicators:
        status = await communicator.receive_json_from(timeout=10)
        assert status["type"] == "status" and status["state"] == "alive" and status["message_id"] == str(message_id)
        frame = await communicator.receive_json_from(timeout=10)
        assert frame["type"] == "delta" and frame["text"] == "Hello"
    for communicator in communicators:
        await communicator.disconnect()
    await wait_until(lambda: not relay().followers, 5)
    await relay().close()
