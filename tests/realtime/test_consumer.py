"""The websocket consumer with Channels' WebsocketCommunicator, in this process.

Producers run on the process's producer loop; the follower gets their updates
through the in-process hub and reads the recording as a safety net.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model

from agent_persistence.realtime.routing import websocket_urlpatterns
from agent_persistence.scope import Scope
from agent_persistence.stores import conversation_store
from tests.agents import ANSWER
from tests.realtime.client import StreamClient

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]

application = URLRouter(websocket_urlpatterns)


@pytest.fixture
def users() -> tuple[Any, Any]:
    model = get_user_model()
    return model.objects.create_user("ws-alice"), model.objects.create_user("ws-bob")


def make_conversation(user: Any, agent: str = "scripted", shared: bool = False) -> uuid.UUID:
    scope = Scope(tenant="", user=str(user.pk))
    conversation = conversation_store().create(scope, agent=agent)
    if shared:
        conversation_store().share(scope, conversation.pk)
    return conversation.pk


async def connect(conversation_id: Any, user: Any) -> WebsocketCommunicator:
    communicator = WebsocketCommunicator(application, f"/ws/conversations/{conversation_id}/")
    communicator.scope["user"] = user
    connected, _ = await communicator.connect()
    assert connected
    return communicator


async def follow(communicator: WebsocketCommunicator, client: StreamClient, until: str = "final", timeout: float = 20) -> StreamClient:
    """Receive frames until one of type ``until`` (default: the final state)."""
    while True:
        frame = await communicator.receive_json_from(timeout=timeout)
        client.apply(frame)
        if frame["type"] == until:
            return client


async def wait_for_text(communicator: WebsocketCommunicator, client: StreamClient, length: int) -> None:
    while len(client.text) < length:
        client.apply(await communicator.receive_json_from(timeout=10))


async def close(*communicators: WebsocketCommunicator) -> None:
    for communicator in communicators:
        await communicator.disconnect()


async def test_an_anonymous_socket_is_closed_with_4401(users: Any) -> None:
    from django.contrib.auth.models import AnonymousUser

    conversation_id = await sync_to_async(make_conversation)(users[0])
    communicator = await connect(conversation_id, AnonymousUser())
    assert (await communicator.receive_output(timeout=5))["code"] == 4401


@pytest.mark.parametrize("whose", ["bob's", "not a uuid"])
async def test_a_conversation_the_user_may_not_read_is_closed_with_4404(users: Any, whose: str) -> None:
    """An absent (new) id is admitted: its start creates the conversation (test_start_new_conversation.py)."""
    alice, bob = users
    conversation_id = {"bob's": None, "not a uuid": "nope"}[whose]
    if conversation_id is None:
        conversation_id = await sync_to_async(make_conversation)(bob)
    communicator = await connect(conversation_id, alice)
    assert (await communicator.receive_output(timeout=5))["code"] == 4404


async def test_attach_to_an_idle_conversation_reports_idle(users: Any) -> None:
    conversation_id = await sync_to_async(make_conversation)(users[0])
    communicator = await connect(conversation_id, users[0])
    await communicator.send_json_to({"type": "attach"})
    frame = await communicator.receive_json_from(timeout=5)
    assert frame == {"type": "status", "state": "idle", "message_id": None, "run_id": None, "epoch": 0, "index": 0}
    await close(communicator)


async def test_start_over_the_socket_streams_the_exact_answer_then_the_final_state(users: Any) -> None:
    conversation_id = await sync_to_async(make_conversation)(users[0])
    communicator = await connect(conversation_id, users[0])
    message_id = uuid.uuid4()
    await communicator.send_json_to({"type": "start", "content": "go", "message_id": str(message_id)})
    client = await follow(communicator, StreamClient())
    assert client.text == ANSWER and client.final_text == ANSWER
    assert client.final["stop_reason"] == "completed" and client.final["message_id"] == str(message_id)
    started = [frame for frame in client.frames if frame["type"] == "started"]
    assert started and started[0]["message_id"] == str(message_id)
    deltas = [frame["index"] for frame in client.frames if frame["type"] == "delta"]
    assert deltas == sorted(set(deltas)) and len(deltas) > 5
    update = await communicator.receive_json_from(timeout=5)
    while update["type"] != "conversation_updated":
        update = await communicator.receive_json_from(timeout=5)
    assert update["message_id"] == str(message_id) and update["conversation_id"] == str(conversation_id)
    await close(communicator)


async def test_a_second_tab_joining_mid_turn_ends_with_the_exact_answer(users: Any) -> None:
    conversation_id = await sync_to_async(make_conversation)(users[0])
    first = await connect(conversation_id, users[0])
    await first.send_json_to({"type": "start", "content": "go"})
    first_client = StreamClient()
    await wait_for_text(first, first_client, len(ANSWER) // 3)
    second = await connect(conversation_id, users[0])
    await second.send_json_to({"type": "attach"})
    second_client, _ = await asyncio.gather(follow(second, StreamClient()), follow(first, first_client))
    assert second_client.text == ANSWER and first_client.text == ANSWER
    catch_up = next(frame for frame in second_client.frames if frame["type"] == "delta")
    assert catch_up["offset"] == 0 and catch_up["text"]  # from the recording, then live
    await close(first, second)


async def test_a_shared_conversation_is_followed_by_another_user(users: Any) -> None:
    alice, bob = users
    conversation_id = await sync_to_async(make_conversation)(alice, shared=True)
    owner = await connect(conversation_id, alice)
    await owner.send_json_to({"type": "start", "content": "go"})
    reader = await connect(conversation_id, bob)
    await reader.send_json_to({"type": "attach"})
    assert (await follow(reader, StreamClient())).final_text == ANSWER
    await reader.send_json_to({"type": "stop"})
    assert (await follow(reader, StreamClient(), until="error")).errors[0]["code"] == "conversation_not_owned"
    await follow(owner, StreamClient())
    await close(owner, reader)


async def test_a_client_that_reattaches_with_its_last_index_gets_only_what_it_lacks(users: Any) -> None:
    conversation_id = await sync_to_async(make_conversation)(users[0])
    first = await connect(conversation_id, users[0])
    await first.send_json_to({"type": "start", "content": "go"})
    client = StreamClient()
    await wait_for_text(first, client, len(ANSWER) // 2)
    await first.disconnect()
    held, seen = len(client.text), len(client.frames)
    await asyncio.sleep(0.2)
    second = await connect(conversation_id, users[0])
    await second.send_json_to(client.attach_frame())
    await follow(second, client)
    assert client.text == ANSWER and client.final_text == ANSWER
    resumed = [frame for frame in client.frames[seen:] if frame["type"] == "delta"]
    assert resumed and resumed[0]["offset"] == held
    await close(second)


async def test_attaching_after_the_turn_sealed_gives_the_final_answer(users: Any) -> None:
    conversation_id = await sync_to_async(make_conversation)(users[0])
    first = await connect(conversation_id, users[0])
    await first.send_json_to({"type": "start", "content": "go"})
    client = await follow(first, StreamClient())
    late = await connect(conversation_id, users[0])
    await late.send_json_to({"type": "attach", "last_index": client.index, "offset": len(client.text), "message_id": client.message_id})
    late_client = StreamClient(message_id=client.message_id, index=client.index, text=client.text)
    await follow(late, late_client)
    assert late_client.final_text == ANSWER
    assert not [frame for frame in late_client.frames if frame["type"] == "delta"]
    await close(first, late)


async def test_followers_attaching_while_the_turn_seals_all_end_with_the_final_answer(users: Any) -> None:
    conversation_id = await sync_to_async(make_conversation)(users[0])
    starter = await connect(conversation_id, users[0])
    await starter.send_json_to({"type": "start", "content": "go"})
    client = StreamClient()
    await wait_for_text(starter, client, len(ANSWER) - 40)
    followers = []
    for _ in range(12):  # staggered across the last chunks and the seal
        communicator = await connect(conversation_id, users[0])
        await communicator.send_json_to({"type": "attach"})
        followers.append(communicator)
        await asyncio.sleep(0.01)
    results = await asyncio.gather(*(follow(communicator, StreamClient()) for communicator in followers))
    assert all(result.final_text == ANSWER for result in results)
    await close(starter, *followers)


async def test_stop_ends_the_turn_cancelled_with_its_partial_answer(users: Any) -> None:
    conversation_id = await sync_to_async(make_conversation)(users[0])
    communicator = await connect(conversation_id, users[0])
    await communicator.send_json_to({"type": "start", "content": "go"})
    client = StreamClient()
    await wait_for_text(communicator, client, 40)
    await communicator.send_json_to({"type": "stop"})
    await follow(communicator, client)
    assert client.final["stop_reason"] == "cancelled"
    partial = client.final_text
    assert partial and ANSWER.startswith(partial) and partial != ANSWER
    assert any(frame["type"] == "stop_requested" for frame in client.frames)
    await close(communicator)


async def test_an_interrupt_is_shown_and_answered_over_the_socket(users: Any) -> None:
    conversation_id = await sync_to_async(make_conversation)(users[0], agent="approval")
    communicator = await connect(conversation_id, users[0])
    await communicator.send_json_to({"type": "start", "content": "go"})
    client = await follow(communicator, StreamClient(), until="interrupt")
    interrupt = client.frames[-1]["interrupts"][0]
    assert interrupt["kind"] == "tool_approval" and interrupt["payload"]["name"] == "lookup"
    await communicator.send_json_to({"type": "answer", "answers": [{"id": interrupt["id"], "response": {"approved": True}}]})
    await follow(communicator, client)
    assert client.final_text == ANSWER and client.text == ANSWER
    answered = next(frame for frame in client.frames if frame["type"] == "answered")
    assert answered["continued"] is True and answered["interrupts"] == [interrupt["id"]]
    await close(communicator)


@pytest.mark.parametrize(
    ("payload", "code"),
    [
        ("{not json", "malformed_request"),
        ("[1, 2]", "invalid_frame"),
        ('{"kind": "attach"}', "invalid_frame"),
        ('{"type": "subscribe"}', "unknown_type"),
        ('{"type": "attach", "last_index": -1}', "invalid_frame"),
        ('{"type": "attach", "last_index": true}', "invalid_frame"),
        ('{"type": "attach", "colour": "red"}', "unknown_field"),
        ('{"type": "start"}', "invalid_frame"),
        ('{"type": "start", "content": "go", "message_id": "x"}', "invalid_frame"),
        ('{"type": "answer", "answers": []}', "invalid_frame"),
        ('{"type": "stop"}', "no_turn_running"),
        ('{"type": "start", "content": "go", "agent": "nobody"}', "unknown_agent"),
        ("x" * (1024 * 1024 + 65 * 1024), "frame_too_large"),
        (b"\x00binary", "invalid_frame"),
    ],
)
async def test_bad_frames_get_an_error_frame_and_the_socket_carries_on(users: Any, payload: Any, code: str) -> None:
    conversation_id = await sync_to_async(make_conversation)(users[0])
    communicator = await connect(conversation_id, users[0])
    if isinstance(payload, bytes):
        await communicator.send_to(bytes_data=payload)
    else:
        await communicator.send_to(text_data=payload)
    frame = await communicator.receive_json_from(timeout=5)
    while frame["type"] != "error":  # a start attaches first
        frame = await communicator.receive_json_from(timeout=5)
    assert frame["code"] == code, frame
    await communicator.send_json_to({"type": "attach"})
    assert (await communicator.receive_json_from(timeout=5))["type"] == "status"
    await close(communicator)


async def test_an_index_from_the_future_is_an_error_and_the_client_gets_the_whole_answer(users: Any) -> None:
    conversation_id = await sync_to_async(make_conversation)(users[0])
    communicator = await connect(conversation_id, users[0])
    await communicator.send_json_to({"type": "start", "content": "go"})
    first = await follow(communicator, StreamClient())
    await communicator.send_json_to({"type": "attach", "last_index": first.index + 1000, "offset": 5, "message_id": first.message_id})
    client = await follow(communicator, StreamClient())
    assert [error["code"] for error in client.errors] == ["index_ahead"]
    assert client.final_text == ANSWER
    await close(communicator)


async def test_a_busy_conversation_refuses_a_second_start_with_its_code(users: Any) -> None:
    conversation_id = await sync_to_async(make_conversation)(users[0])
    communicator = await connect(conversation_id, users[0])
    await communicator.send_json_to({"type": "start", "content": "go"})
    client = StreamClient()
    await wait_for_text(communicator, client, 10)
    await communicator.send_json_to({"type": "start", "content": "again"})
    await follow(communicator, client)
    assert [frame["code"] for frame in client.errors] == ["conversation_busy"]
    assert json.dumps(client.errors[0])  # details are JSON
    await close(communicator)


async def test_a_start_with_a_taken_message_id_is_message_exists_and_runs_nothing(users: Any) -> None:
    """An answer could never be stored under a taken id: the start frame is refused before a run exists."""
    from agent_persistence.models import Message, Run

    conversation_id = await sync_to_async(make_conversation)(users[0])
    communicator = await connect(conversation_id, users[0])
    await communicator.send_json_to({"type": "start", "content": "go"})
    first = await follow(communicator, StreamClient())
    runs = await sync_to_async(Run.objects.count)()
    await communicator.send_json_to({"type": "start", "content": "again", "message_id": first.message_id})
    frame = await communicator.receive_json_from(timeout=5)
    while frame["type"] != "error":
        frame = await communicator.receive_json_from(timeout=5)
    assert frame["code"] == "message_exists", frame
    assert await sync_to_async(Run.objects.count)() == runs
    assert await sync_to_async(Message.objects.filter(conversation_id=conversation_id).count)() == 2
    await close(communicator)
