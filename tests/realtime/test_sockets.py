"""What a socket holds, and when it must let go: releases on every exit, the per-user cap, access re-checks, idle cost.

In this process, with Channels' WebsocketCommunicator and the in-memory layer
(followers of idle conversations poll with back-off). The spanning-layer
cases (no reads at all while idle, the relay across a Redis restart) are in
``test_relay.py``; two real servers through a Redis outage in ``test_outage.py``.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Iterator

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model

from agent_persistence.realtime import consumers
from agent_persistence.realtime.delivery import hub
from agent_persistence.realtime.sockets import sockets
from agent_persistence.scope import Scope
from agent_persistence.stores import conversation_store
from tests.agents import ANSWER
from tests.realtime.client import StreamClient
from tests.realtime.instrument import QueryCounter, follower_tasks
from tests.realtime.test_consumer import connect, follow, make_conversation, wait_for_text

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(90)]


@pytest.fixture
def users() -> tuple[Any, Any]:
    model = get_user_model()
    return model.objects.create_user("sockets-alice"), model.objects.create_user("sockets-bob")


@pytest.fixture
def queries() -> Iterator[QueryCounter]:
    counter = QueryCounter().install()
    yield counter
    counter.uninstall()


def configure(settings: Any, **values: Any) -> None:
    settings.AGENT_PERSISTENCE = {**settings.AGENT_PERSISTENCE, **values}


def scope_of(user: Any) -> Scope:
    return Scope(tenant="", user=str(user.pk))


async def receive_close(communicator: Any, timeout: float) -> dict[str, Any]:
    """The server's close message, skipping the frames before it."""
    deadline = time.monotonic() + timeout
    while True:
        output = await communicator.receive_output(timeout=max(0.01, deadline - time.monotonic()))
        if output["type"] == "websocket.close":
            return output


async def attached(conversation_id: Any, user: Any) -> Any:
    communicator = await connect(conversation_id, user)
    await communicator.send_json_to({"type": "attach"})
    assert (await communicator.receive_json_from(timeout=10))["type"] == "status"
    return communicator


async def settled(condition: Any, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


# -- every exit releases the follower -----------------------------------------------------------------


async def test_thirty_sockets_that_crash_or_vanish_leave_no_follower_and_no_reads(users: Any, queries: QueryCounter) -> None:
    """10 hostile frames then a disconnect, 10 plain disconnects, 10 applications cancelled under a socket
    (what an ASGI server does to a connection it lost): afterwards no follower task, no hub
    subscription, no counted socket, and no database statement for 3 s."""
    conversation_id = await sync_to_async(make_conversation)(users[0])
    communicators = [await attached(conversation_id, users[0]) for _ in range(30)]
    assert follower_tasks() == 30 and hub.count(conversation_id) == 30
    for communicator in communicators[:10]:
        await communicator.send_to(text_data="[" * 100_000 + "]" * 100_000)
        frame = await communicator.receive_json_from(timeout=10)
        assert frame["type"] == "error" and frame["code"] == "malformed_request", frame
        await communicator.disconnect()
    for communicator in communicators[10:20]:
        await communicator.disconnect()
    for communicator in communicators[20:]:
        communicator.future.cancel()
        with pytest.raises(asyncio.CancelledError):
            await communicator.future
    assert await settled(lambda: follower_tasks() == 0 and hub.count() == 0 and sockets().count() == 0), (
        follower_tasks(), hub.count(), sockets().count()
    )
    # A read a follower had already handed to a worker thread when its task was cancelled still finishes
    # (a thread cannot be cancelled): count from a second later.
    await asyncio.sleep(1)
    before = queries.count
    await asyncio.sleep(3)
    assert queries.count == before


async def test_a_socket_closed_for_lost_access_releases_its_follower(users: Any, settings: Any) -> None:
    configure(settings, WEBSOCKET_ACCESS_CHECK_INTERVAL=0.3)
    alice, bob = users
    conversation_id = await sync_to_async(make_conversation)(alice, shared=True)
    reader = await attached(conversation_id, bob)
    await sync_to_async(conversation_store().share)(scope_of(alice), conversation_id, False)
    assert (await receive_close(reader, 10))["code"] == 4404
    assert await settled(lambda: follower_tasks() == 0 and hub.count() == 0 and sockets().count() == 0)


# -- hostile frames -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "code"),
    [
        ("[" * 100_000 + "]" * 100_000, "malformed_request"),  # RecursionError in json.loads on main
        ('{"type": "start", "content": ' + "[" * 70 + "]" * 70 + "}", "malformed_request"),
        ('{"type": "start", "content": "\\ud800"}', "invalid"),  # UnicodeEncodeError at the store on main
        ('{"type": "start", "content": "\ud800"}', "invalid"),  # a raw lone surrogate in the text
        ('{"type": "start", "content": "a\\u0000b"}', "invalid"),
        ('{"type": "attach", "last_index": 1e999}', "invalid"),
        ('{"type": "attach", "last_index": 123456789012345678901234567890}', "invalid"),
        ('{"type": "attach", "offset": NaN}', "invalid"),
        ('{"type": "start", "content": {"\\ud83d": 1}}', "invalid"),
    ],
)
async def test_a_hostile_frame_gets_an_error_frame_and_the_socket_stays_usable(users: Any, payload: str, code: str) -> None:
    conversation_id = await sync_to_async(make_conversation)(users[0])
    communicator = await attached(conversation_id, users[0])
    await communicator.send_to(text_data=payload)
    frame = await communicator.receive_json_from(timeout=10)
    assert frame["type"] == "error" and frame["code"] == code, frame
    if code in ("malformed_request", "invalid"):
        assert frame["field"] == "frame"
    await communicator.send_json_to({"type": "start", "content": "go"})
    client = await follow(communicator, StreamClient())
    assert client.final_text == ANSWER
    await communicator.disconnect()


async def test_an_unforeseen_error_in_a_handler_is_an_internal_error_frame(users: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Anything a handler raises (here a fault injected into the runtime call) becomes ``internal_error``."""

    async def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("injected fault")

    monkeypatch.setattr(consumers, "cancel_turn", broken)
    conversation_id = await sync_to_async(make_conversation)(users[0])
    communicator = await attached(conversation_id, users[0])
    await communicator.send_json_to({"type": "stop"})
    frame = await communicator.receive_json_from(timeout=10)
    assert frame == {"type": "error", "code": "internal_error", "message": "The server could not handle this frame."}
    await communicator.send_json_to({"type": "attach"})
    assert (await communicator.receive_json_from(timeout=10))["type"] == "status"
    await communicator.disconnect()


# -- the per-user cap -------------------------------------------------------------------------------------


async def test_sockets_over_the_per_user_cap_are_refused_with_4429(users: Any, settings: Any) -> None:
    configure(settings, WEBSOCKET_MAX_PER_USER=3)
    alice, bob = users
    conversation_id = await sync_to_async(make_conversation)(alice, shared=True)
    held = [await attached(conversation_id, alice) for _ in range(3)]
    refused = await connect(conversation_id, alice)
    assert (await refused.receive_output(timeout=5)) == {"type": "websocket.close", "code": 4429}
    other_user = await attached(conversation_id, bob)  # the cap is per user
    await held[0].disconnect()
    assert await settled(lambda: sockets().count(scope_of(alice)) == 2)
    again = await attached(conversation_id, alice)  # a freed place can be taken again
    for communicator in [*held[1:], other_user, again]:
        await communicator.disconnect()
    assert await settled(lambda: sockets().count() == 0)


# -- access is re-checked ---------------------------------------------------------------------------------


@pytest.mark.parametrize("change", ["unshared", "deleted"])
async def test_an_idle_readers_socket_is_closed_with_4404_within_one_check_and_cannot_reconnect(
    users: Any, settings: Any, change: str
) -> None:
    configure(settings, WEBSOCKET_ACCESS_CHECK_INTERVAL=0.5)
    alice, bob = users
    conversation_id = await sync_to_async(make_conversation)(alice, shared=True)
    reader = await attached(conversation_id, bob)
    owner = await attached(conversation_id, alice)
    if change == "unshared":
        await sync_to_async(conversation_store().share)(scope_of(alice), conversation_id, False)
    else:
        await sync_to_async(conversation_store().delete)(scope_of(alice), conversation_id)
    began = time.monotonic()
    assert (await receive_close(reader, 5))["code"] == 4404
    assert time.monotonic() - began < 0.5 + 2.0  # one interval, with room for a loaded machine
    if change == "deleted":
        assert (await receive_close(owner, 5))["code"] == 4404
    else:
        await owner.send_json_to({"type": "attach"})  # the owner keeps reading
        assert (await owner.receive_json_from(timeout=5))["type"] == "status"
        await owner.disconnect()
    again = await connect(conversation_id, bob)
    if change == "unshared":
        assert (await again.receive_output(timeout=5))["code"] == 4404
    else:  # the id is free again: a socket to it is a new conversation's, idle until its own start creates it
        await again.send_json_to({"type": "attach"})
        frame = await again.receive_json_from(timeout=5)
        assert (frame["type"], frame["state"], frame["message_id"]) == ("status", "idle", None)
        await again.disconnect()


async def test_an_attach_after_the_conversation_was_unshared_closes_the_socket(users: Any, settings: Any) -> None:
    configure(settings, WEBSOCKET_ACCESS_CHECK_INTERVAL=600)  # no sweep: the attach itself re-checks
    alice, bob = users
    conversation_id = await sync_to_async(make_conversation)(alice, shared=True)
    reader = await attached(conversation_id, bob)
    await sync_to_async(conversation_store().share)(scope_of(alice), conversation_id, False)
    await reader.send_json_to({"type": "attach"})
    assert (await receive_close(reader, 5))["code"] == 4404


async def test_a_reader_never_receives_a_turn_started_after_the_conversation_was_unshared(users: Any, settings: Any) -> None:
    configure(settings, WEBSOCKET_ACCESS_CHECK_INTERVAL=600)  # no sweep: switching to the new turn re-checks
    alice, bob = users
    conversation_id = await sync_to_async(make_conversation)(alice, shared=True)
    reader = await attached(conversation_id, bob)
    await sync_to_async(conversation_store().share)(scope_of(alice), conversation_id, False)
    owner = await connect(conversation_id, alice)
    await owner.send_json_to({"type": "start", "content": "go"})
    frames = []
    while True:
        output = await reader.receive_output(timeout=10)
        if output["type"] == "websocket.close":
            break
        frames.append(output)
    assert output["code"] == 4404 and frames == []
    owner_client = await follow(owner, StreamClient())
    assert owner_client.final_text == ANSWER
    await owner.disconnect()


# -- idle cost without a spanning layer ------------------------------------------------------------------


async def test_idle_sockets_back_off_their_reads_and_a_turn_still_reaches_them_at_once(
    users: Any, settings: Any, queries: QueryCounter
) -> None:
    """With the in-memory layer an idle follower reads at 0.1, 0.2, 0.4 ... up to 1 s apart instead of every 0.1 s;
    a turn produced in this process reaches it through the hub without waiting for a read."""
    configure(settings, RECORDING_FLUSH_INTERVAL=0.1, WEBSOCKET_IDLE_POLL_MAX=1.0, WEBSOCKET_ACCESS_CHECK_INTERVAL=600)
    conversation_id = await sync_to_async(make_conversation)(users[0])
    idle = [await attached(conversation_id, users[0]) for _ in range(5)]
    before = queries.count
    await asyncio.sleep(4)
    # Every 0.1 s, five sockets would make 200 reads in 4 s; backing off to 1 s they make about 30.
    reads = queries.count - before
    assert reads < 80, reads
    starter = await connect(conversation_id, users[0])
    await starter.send_json_to({"type": "start", "content": "go"})
    clients = [StreamClient() for _ in idle]
    began = time.monotonic()
    await asyncio.gather(*(wait_for_text(communicator, client, 1) for communicator, client in zip(idle, clients)))
    assert time.monotonic() - began < 2.0
    await asyncio.gather(*(follow(communicator, client) for communicator, client in zip(idle, clients)))
    assert all(client.final_text == ANSWER and client.text == ANSWER for client in clients)
    await follow(starter, StreamClient())
    for communicator in [*idle, starter]:
        await communicator.disconnect()
