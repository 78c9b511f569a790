"""A socket to a new conversation id: its start creates the conversation, owned by the socket's user.

In this process, with Channels' WebsocketCommunicator and the test database.
The race of two sockets starting one new id at once, on two real server
processes, is ``test_start_new_conversation_replicas.py``.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AnonymousUser

from agent_persistence.models import Conversation, Message, Run
from agent_persistence.realtime.routing import websocket_urlpatterns
from agent_persistence.realtime.tickets import issue_ticket
from agent_persistence.scope import Scope
from agent_persistence.stores import conversation_store
from tests.agents import ANSWER
from tests.realtime.client import StreamClient

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]

application = URLRouter(websocket_urlpatterns)
IDLE = {"type": "status", "state": "idle", "message_id": None, "run_id": None, "epoch": 0, "index": 0}


@pytest.fixture
def users() -> tuple[Any, Any]:
    model = get_user_model()
    return model.objects.create_user("new-alice"), model.objects.create_user("new-bob")


def scope_of(user: Any, tenant: str = "") -> Scope:
    return Scope(tenant=tenant, user=str(user.pk))


async def open_socket(path_id: Any, user: Any, query: str = "") -> WebsocketCommunicator:
    communicator = WebsocketCommunicator(application, f"/ws/conversations/{path_id}/{query}")
    communicator.scope["user"] = user
    connected, _ = await communicator.connect()
    assert connected
    return communicator


async def frames_until(communicator: WebsocketCommunicator, client: StreamClient, until: str, timeout: float = 20) -> StreamClient:
    while True:
        frame = await communicator.receive_json_from(timeout=timeout)
        client.apply(frame)
        if frame["type"] == until:
            return client


async def counts() -> tuple[int, int, int]:
    return (await Conversation.objects.acount(), await Run.objects.acount(), await Message.objects.acount())


async def test_a_socket_to_a_new_id_attaches_idle_and_its_start_creates_the_conversation_owned_by_the_user(users: Any) -> None:
    """Before: closed with 4404 at connect, so a frontend could not start a brand-new conversation."""
    alice, _ = users
    conversation_id = uuid.uuid4()
    communicator = await open_socket(conversation_id, alice)
    await communicator.send_json_to({"type": "attach"})
    assert await communicator.receive_json_from(timeout=5) == IDLE
    assert await counts() == (0, 0, 0)  # attaching creates nothing
    await communicator.send_json_to({"type": "start", "content": "go", "agent": "scripted"})
    client = await frames_until(communicator, StreamClient(), "final")
    assert client.text == ANSWER and client.final_text == ANSWER
    assert [frame["type"] for frame in client.frames].count("started") <= 1
    conversation = await Conversation.objects.aget(pk=conversation_id)
    assert (conversation.tenant, conversation.owner, conversation.agent) == ("", str(alice.pk), "scripted")
    assert await Run.objects.filter(conversation_id=conversation_id).acount() == 1
    await communicator.disconnect()


async def test_the_started_reply_comes_and_the_socket_then_follows_the_conversation(users: Any) -> None:
    alice, _ = users
    conversation_id, message_id = uuid.uuid4(), uuid.uuid4()
    communicator = await open_socket(conversation_id, alice)
    await communicator.send_json_to({"type": "start", "content": "go", "agent": "scripted", "message_id": str(message_id)})
    client = await frames_until(communicator, StreamClient(), "final")
    if not any(frame["type"] == "started" for frame in client.frames):
        await frames_until(communicator, client, "started")
    started = next(frame for frame in client.frames if frame["type"] == "started")
    assert started["message_id"] == str(message_id) and started["epoch"] == 1
    # A second turn on the same socket: it follows the conversation like any other now.
    await communicator.send_json_to({"type": "start", "content": "again"})
    second = await frames_until(communicator, StreamClient(), "final")
    assert second.final_text == ANSWER and second.message_id != str(message_id)
    assert await Run.objects.filter(conversation_id=conversation_id).acount() == 2
    await communicator.disconnect()


async def test_a_refused_start_on_a_new_id_creates_nothing(users: Any) -> None:
    alice, _ = users
    conversation_id = uuid.uuid4()
    communicator = await open_socket(conversation_id, alice)
    await communicator.send_json_to({"type": "start", "content": "go", "agent": "no-such-agent"})
    frame = await communicator.receive_json_from(timeout=5)
    assert frame["type"] == "error" and frame["code"] == "unknown_agent", frame
    await communicator.send_json_to({"type": "start", "content": "bad \u0000 text", "agent": "scripted"})
    frame = await communicator.receive_json_from(timeout=5)
    assert frame["type"] == "error" and frame["code"] == "invalid", frame
    assert await counts() == (0, 0, 0)
    # The socket stays usable: a good start now creates it.
    await communicator.send_json_to({"type": "start", "content": "go", "agent": "scripted"})
    assert (await frames_until(communicator, StreamClient(), "final")).final_text == ANSWER
    assert await Conversation.objects.acount() == 1
    await communicator.disconnect()


@pytest.mark.parametrize("frame", [{"type": "stop"}, {"type": "resume"}, {"type": "answer", "answers": [{"id": str(uuid.UUID(int=1)), "response": {}}]}])
async def test_stop_answer_and_resume_on_a_new_id_are_not_found_and_create_nothing(users: Any, frame: dict[str, Any]) -> None:
    communicator = await open_socket(uuid.uuid4(), users[0])
    await communicator.send_json_to(frame)
    reply = await communicator.receive_json_from(timeout=5)
    assert reply["type"] == "error" and reply["code"] == "not_found", reply
    assert await counts() == (0, 0, 0)
    await communicator.disconnect()


@pytest.mark.parametrize("where", ["another user", "another tenant"])
async def test_an_id_of_someone_elses_conversation_stays_4404_and_is_never_taken_over(users: Any, where: str) -> None:
    alice, bob = users
    owner_scope = scope_of(bob) if where == "another user" else scope_of(alice, tenant="other")
    theirs = await sync_to_async(conversation_store().create)(owner_scope, agent="scripted")
    communicator = await open_socket(theirs.pk, alice)
    assert (await communicator.receive_output(timeout=5))["code"] == 4404
    stored = await Conversation.objects.aget(pk=theirs.pk)
    assert (stored.tenant, stored.owner, stored.epoch) == (theirs.tenant, theirs.owner, theirs.epoch)
    assert await Run.objects.acount() == 0 and await Message.objects.acount() == 0


async def test_an_id_taken_by_someone_else_after_connect_closes_the_socket_with_4404_at_start(users: Any) -> None:
    alice, bob = users
    conversation_id = uuid.uuid4()
    communicator = await open_socket(conversation_id, alice)
    await sync_to_async(conversation_store().create)(scope_of(bob), id=conversation_id, agent="scripted")
    await communicator.send_json_to({"type": "start", "content": "go", "agent": "scripted"})
    assert (await communicator.receive_output(timeout=5))["code"] == 4404
    stored = await Conversation.objects.aget(pk=conversation_id)
    assert stored.owner == str(bob.pk) and stored.epoch == 0
    assert await Run.objects.acount() == 0 and await Message.objects.acount() == 0


@pytest.mark.parametrize("hostile", ["not-a-uuid", "%00", "%ED%A0%80", "a" * 5000, str(uuid.uuid4()) + "x", "%F0%9F%98%80"])
async def test_a_malformed_id_is_4404_and_creates_nothing(users: Any, hostile: str) -> None:
    communicator = await open_socket(hostile, users[0])
    assert (await communicator.receive_output(timeout=5))["code"] == 4404
    assert await counts() == (0, 0, 0)


@pytest.mark.parametrize("raw", ["\x00", "\ud800", "12345678-1234-1234-1234-1234567890ab\x00"])
async def test_an_id_with_nul_or_a_lone_surrogate_in_the_route_is_4404_and_creates_nothing(users: Any, raw: str) -> None:
    """The route's kwargs as an ASGI server would hand them over, undecodable characters and all."""
    from agent_persistence.realtime.consumers import ConversationConsumer

    communicator = WebsocketCommunicator(ConversationConsumer.as_asgi(), "/ws/conversations/x/")
    communicator.scope["user"] = users[0]
    communicator.scope["url_route"] = {"args": (), "kwargs": {"conversation_id": raw}}
    connected, _ = await communicator.connect()
    assert connected
    assert (await communicator.receive_output(timeout=5))["code"] == 4404
    assert await counts() == (0, 0, 0)


async def test_an_anonymous_socket_to_a_new_id_is_refused_and_creates_nothing() -> None:
    communicator = await open_socket(uuid.uuid4(), AnonymousUser())
    assert (await communicator.receive_output(timeout=5))["code"] == 4401
    assert await counts() == (0, 0, 0)


async def test_a_second_tab_idle_on_the_new_id_follows_the_turn_the_first_tab_starts(users: Any) -> None:
    alice, _ = users
    conversation_id = uuid.uuid4()
    first = await open_socket(conversation_id, alice)
    second = await open_socket(conversation_id, alice)
    await second.send_json_to({"type": "attach"})
    assert await second.receive_json_from(timeout=5) == IDLE
    await first.send_json_to({"type": "start", "content": "go", "agent": "scripted"})
    first_client = await frames_until(first, StreamClient(), "final")
    second_client = await frames_until(second, StreamClient(), "final")
    assert first_client.final_text == ANSWER and second_client.text == ANSWER and second_client.final_text == ANSWER
    await first.disconnect()
    await second.disconnect()


async def test_a_ticket_bound_to_a_new_id_opens_it_and_its_start_creates_the_conversation(users: Any) -> None:
    alice, _ = users
    conversation_id = uuid.uuid4()
    ticket = (await sync_to_async(issue_ticket)(scope_of(alice), conversation_id)).ticket
    communicator = await open_socket(conversation_id, AnonymousUser(), f"?ticket={ticket}")
    await communicator.send_json_to({"type": "start", "content": "go", "agent": "scripted"})
    assert (await frames_until(communicator, StreamClient(), "final")).final_text == ANSWER
    assert (await Conversation.objects.aget(pk=conversation_id)).owner == str(alice.pk)
    await communicator.disconnect()
