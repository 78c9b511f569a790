"""The websocket protocol's JSON Schema (``agent_persistence/realtime/protocol.schema.json``) against the server.

Real sockets (Channels' ``WebsocketCommunicator`` on the real consumer, real
producers on the process's producer loop, the real test database) go through
whole turns: attach, start, deltas, final, a second attach with a position,
stop, an interrupt and its answer, a busy start, an index from the future and
every kind of bad frame. Every frame the server sends and every frame the
client sends is validated against the schema, so the schema (and the
TypeScript client's types generated from it) cannot drift from the server.
The schema is also checked to be strict (it refuses what the server would
never send) and to agree with the server's own frame parser.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from importlib import resources
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model
from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

from agent_persistence.models import Interrupt
from agent_persistence.realtime import protocol
from agent_persistence.realtime.routing import websocket_urlpatterns
from agent_persistence.scope import Scope
from agent_persistence.stores import conversation_store
from tests.agents import ANSWER
from tests.realtime.client import StreamClient

SCHEMA = json.loads(resources.files("agent_persistence.realtime").joinpath("protocol.schema.json").read_text())


def validator_of(definition: str | None) -> Draft202012Validator:
    """A validator of the whole schema, or of one of its definitions (``ClientFrame``, ``ServerFrame``)."""
    schema = SCHEMA if definition is None else {**{k: v for k, v in SCHEMA.items() if k != "anyOf"}, "$ref": f"#/$defs/{definition}"}
    return Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)


FRAME, CLIENT, SERVER = validator_of(None), validator_of("ClientFrame"), validator_of("ServerFrame")

application = URLRouter(websocket_urlpatterns)


def server_frame_errors(frame: Any) -> list[str]:
    return [error.message for error in SERVER.iter_errors(frame)]


class CheckedSocket:
    """A communicator that validates every frame it sends and receives against the schema."""

    def __init__(self, communicator: WebsocketCommunicator) -> None:
        self.communicator = communicator
        self.sent: list[dict[str, Any]] = []
        self.received: list[dict[str, Any]] = []

    async def send(self, frame: dict[str, Any]) -> None:
        CLIENT.validate(frame)
        self.sent.append(frame)
        await self.communicator.send_json_to(frame)

    async def send_raw(self, text: str | None = None, data: bytes | None = None) -> None:
        """A frame the schema refuses (the bad-frame tests check that it does)."""
        await self.communicator.send_to(text_data=text, bytes_data=data)

    async def receive(self, timeout: float = 20) -> dict[str, Any]:
        frame = await self.communicator.receive_json_from(timeout=timeout)
        assert not server_frame_errors(frame), (frame, server_frame_errors(frame))
        self.received.append(frame)
        return frame

    async def follow(self, client: StreamClient, until: str = "final", min_text: int | None = None) -> StreamClient:
        while min_text is None or len(client.text) < min_text:
            frame = await self.receive()
            client.apply(frame)
            if min_text is None and frame["type"] == until:
                break
        return client

    async def close(self) -> None:
        await self.communicator.disconnect()


@pytest.fixture
def owner() -> Any:
    return get_user_model().objects.create_user("schema-alice")


@pytest.fixture(autouse=True)
def close_producer_connections() -> Iterator[None]:
    """Close the database connections of the producer loop's thread, so the test database can go."""
    yield
    from django.db import connections

    from agent_persistence.runtime import loop

    loop.run(sync_to_async(connections.close_all)())


def make_conversation(user: Any, agent: str = "scripted") -> uuid.UUID:
    return conversation_store().create(Scope(tenant="", user=str(user.pk)), agent=agent).pk


async def connect(conversation_id: uuid.UUID, user: Any) -> CheckedSocket:
    communicator = WebsocketCommunicator(application, f"/ws/conversations/{conversation_id}/")
    communicator.scope["user"] = user
    connected, _ = await communicator.connect()
    assert connected
    return CheckedSocket(communicator)


def types(frames: list[dict[str, Any]]) -> set[str]:
    return {frame["type"] for frame in frames}


# -- the schema itself -----------------------------------------------------------------------------


def test_the_schema_is_a_valid_draft_2020_12_document_shipped_in_the_package() -> None:
    Draft202012Validator.check_schema(SCHEMA)
    assert SCHEMA["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    client_types = {SCHEMA["$defs"][ref["$ref"].rsplit("/", 1)[1]]["properties"]["type"]["const"] for ref in SCHEMA["$defs"]["ClientFrame"]["oneOf"]}
    assert client_types == protocol.CLIENT_TYPES
    for ref in SCHEMA["$defs"]["ClientFrame"]["oneOf"]:
        definition = SCHEMA["$defs"][ref["$ref"].rsplit("/", 1)[1]]
        kind = definition["properties"]["type"]["const"]
        assert set(definition["properties"]) - {"type"} == protocol.FIELDS[kind], kind
    closes = {protocol.CLOSE_UNAUTHENTICATED, protocol.CLOSE_NOT_FOUND, protocol.CLOSE_TOO_MANY_SOCKETS, protocol.CLOSE_INTERNAL_ERROR,
              protocol.CLOSE_TICKET_REFUSED}
    assert set(SCHEMA["$defs"]["CloseCode"]["enum"]) == closes


@pytest.mark.parametrize(
    "frame",
    [
        {"type": "status", "state": "idle", "message_id": None, "run_id": None, "epoch": 0},  # index missing
        {"type": "status", "state": "sleeping", "message_id": None, "run_id": None, "epoch": 0, "index": 0},
        {"type": "delta", "message_id": "not-a-uuid", "index": 1, "offset": 0, "text": "x"},
        {"type": "delta", "message_id": str(uuid.uuid4()), "index": 1, "offset": -1, "text": "x"},
        {"type": "final", "message_id": str(uuid.uuid4()), "index": 1, "message": {"role": "user", "content": "x"}, "stop_reason": "completed"},
        {"type": "error", "message": "no code"},
        {"type": "started", "message_id": str(uuid.uuid4()), "run_id": str(uuid.uuid4()), "epoch": 1, "resumed": False, "extra": 1},
        {"type": "answered", "interrupts": [], "continued": True, "message_id": str(uuid.uuid4())},  # the launch half-told
        {"type": "subscribe"},
    ],
)
def test_the_schema_refuses_server_frames_the_server_never_sends(frame: dict[str, Any]) -> None:
    assert server_frame_errors(frame)


@pytest.mark.parametrize(
    "text",
    [
        '{"type": "attach"}',
        '{"type": "attach", "last_index": 3, "offset": 12, "message_id": "5f0c0e8e-4a8c-4b43-9d7c-2a4c8f2f9e01"}',
        '{"type": "attach", "message_id": null}',
        '{"type": "start", "content": "go"}',
        '{"type": "start", "content": {"parts": [1, 2]}, "agent": "scripted", "message_id": "5f0c0e8e-4a8c-4b43-9d7c-2a4c8f2f9e01"}',
        '{"type": "stop"}',
        '{"type": "answer", "answers": [{"id": "5f0c0e8e-4a8c-4b43-9d7c-2a4c8f2f9e01", "response": {"approved": true}}]}',
        '{"type": "resume"}',
        '[1, 2]',
        '{"kind": "attach"}',
        '{"type": "subscribe"}',
        '{"type": "attach", "last_index": -1}',
        '{"type": "attach", "last_index": true}',
        '{"type": "attach", "offset": 1.5}',
        '{"type": "attach", "colour": "red"}',
        '{"type": "start"}',
        '{"type": "start", "content": "go", "message_id": "x"}',
        '{"type": "start", "content": "go", "agent": 7}',
        '{"type": "answer", "answers": []}',
        '{"type": "answer", "answers": [3]}',
        '{"type": "stop", "now": true}',
    ],
)
def test_the_schema_accepts_exactly_the_client_frames_the_server_parses(text: str) -> None:
    """Where the server's parser refuses a frame the schema refuses it too, and the other way round."""
    try:
        protocol.parse_frame(text, None)
        parsed = True
    except protocol.ProtocolError:
        parsed = False
    valid = CLIENT.is_valid(json.loads(text))
    assert valid == parsed, (text, [error.message for error in CLIENT.iter_errors(json.loads(text))])


# -- every frame of whole turns over real sockets --------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(90)
def test_every_frame_of_a_turn_with_a_second_tab_and_a_reattach_matches_the_schema(owner: Any) -> None:
    async def scenario() -> None:
        conversation_id = await sync_to_async(make_conversation)(owner)
        first = await connect(conversation_id, owner)
        await first.send({"type": "attach"})
        assert (await first.receive())["state"] == "idle"
        await first.send({"type": "start", "content": "go", "message_id": str(uuid.uuid4())})
        first_client = await first.follow(StreamClient(), min_text=len(ANSWER) // 3)
        second = await connect(conversation_id, owner)
        await second.send({"type": "attach"})
        tab = await second.follow(StreamClient(), min_text=len(ANSWER) // 2)
        await second.close()
        held = StreamClient(message_id=tab.message_id, index=tab.index, text=tab.text)
        again = await connect(conversation_id, owner)
        await again.send(held.attach_frame())
        await again.follow(held)
        assert (await first.follow(first_client)).final_text == ANSWER
        while (await first.receive())["type"] != "conversation_updated":
            pass
        assert held.text == ANSWER and held.final_text == ANSWER
        late = await connect(conversation_id, owner)
        await late.send({"type": "attach", "last_index": held.index, "offset": len(held.text), "message_id": held.message_id})
        assert (await late.follow(StreamClient(message_id=held.message_id, text=held.text, index=held.index))).final_text == ANSWER
        await first.close(), await again.close(), await late.close()
        frames = first.received + second.received + again.received + late.received
        assert {"status", "started", "delta", "final", "conversation_updated"} <= types(frames)
        assert any("tool_calls" in frame for frame in frames if frame["type"] == "delta")

    async_to_sync(scenario)()


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(90)
def test_every_frame_of_an_interrupt_answered_over_the_socket_matches_the_schema(owner: Any) -> None:
    async def scenario() -> None:
        conversation_id = await sync_to_async(make_conversation)(owner, "approval")
        socket = await connect(conversation_id, owner)
        await socket.send({"type": "start", "content": "go"})
        client = await socket.follow(StreamClient(), until="interrupt")
        interrupt = client.frames[-1]["interrupts"][0]
        assert interrupt["kind"] == "tool_approval"
        await socket.send({"type": "answer", "answers": [{"id": interrupt["id"], "response": {"approved": True}}]})
        await socket.follow(client)
        assert client.final_text == ANSWER
        await socket.close()
        frames = socket.received
        assert {"interrupt", "answered", "final"} <= types(frames)
        assert any(frame["state"] == "interrupted" for frame in frames if frame["type"] == "status")

    async_to_sync(scenario)()


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(90)
def test_a_question_cancelled_over_the_socket_matches_the_schema_and_ends_the_turn(owner: Any) -> None:
    async def scenario() -> None:
        conversation_id = await sync_to_async(make_conversation)(owner, "approval")
        socket = await connect(conversation_id, owner)
        await socket.send({"type": "start", "content": "go"})
        client = await socket.follow(StreamClient(), until="interrupt")
        interrupt = client.frames[-1]["interrupts"][0]
        await socket.send({"type": "answer", "answers": [{"id": interrupt["id"], "status": "cancelled"}]})
        await socket.follow(client)
        await socket.close()
        assert client.final is not None and client.final["stop_reason"] == "completed"
        results = [call["result"] for call in client.final["message"]["tool_calls"]]
        assert results == [{"denied": True, "reason": None, "cancelled": True}]
        answered = [frame for frame in socket.received if frame["type"] == "answered"]
        assert answered and answered[0]["interrupts"] == [interrupt["id"]]
        stored = await sync_to_async(Interrupt.objects.get)(pk=interrupt["id"])
        assert stored.status == "cancelled"

    async_to_sync(scenario)()


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(90)
def test_every_frame_of_a_stopped_turn_and_of_refusals_matches_the_schema(owner: Any) -> None:
    async def scenario() -> None:
        conversation_id = await sync_to_async(make_conversation)(owner)
        socket = await connect(conversation_id, owner)
        await socket.send({"type": "stop"})
        assert (await socket.receive())["code"] == "no_turn_running"
        await socket.send({"type": "resume"})
        assert (await socket.receive())["type"] == "error"
        await socket.send({"type": "start", "content": "go"})
        client = await socket.follow(StreamClient(), min_text=30)
        await socket.send({"type": "start", "content": "again"})
        await socket.send({"type": "stop"})
        await socket.follow(client)
        assert client.final["stop_reason"] == "cancelled"
        assert [error["code"] for error in client.errors] == ["conversation_busy"]
        await socket.send({"type": "attach", "last_index": client.index + 1000, "offset": 5, "message_id": client.message_id})
        ahead = await socket.follow(StreamClient())
        assert [error["code"] for error in ahead.errors] == ["index_ahead"]
        await socket.close()
        assert {"stop_requested", "error", "final"} <= types(socket.received)

    async_to_sync(scenario)()


BAD_FRAMES = [
    ("{not json", None, "malformed_request"),
    ("[1, 2]", None, "invalid_frame"),
    ('{"kind": "attach"}', None, "invalid_frame"),
    ('{"type": "subscribe"}', None, "unknown_type"),
    ('{"type": "attach", "last_index": -1}', None, "invalid_frame"),
    ('{"type": "attach", "colour": "red"}', None, "unknown_field"),
    ('{"type": "start"}', None, "invalid_frame"),
    ('{"type": "start", "content": "go", "message_id": "x"}', None, "invalid_frame"),
    ('{"type": "answer", "answers": []}', None, "invalid_frame"),
    ('{"type": "answer", "answers": [{"id": "5f0c0e8e-4a8c-4b43-9d7c-2a4c8f2f9e01"}]}', None, "invalid"),
    ("x" * (1024 * 1024 + 65 * 1024), None, "frame_too_large"),
    (None, b"\x00binary", "invalid_frame"),
]


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(90)
def test_the_error_frames_for_bad_frames_match_the_schema_and_the_schema_refuses_the_bad_frames(owner: Any) -> None:
    async def scenario() -> None:
        conversation_id = await sync_to_async(make_conversation)(owner)
        socket = await connect(conversation_id, owner)
        codes = []
        for text, data, code in BAD_FRAMES:
            if text is not None:
                try:
                    assert not CLIENT.is_valid(json.loads(text)), text
                except ValueError:
                    pass  # not JSON at all
            await socket.send_raw(text, data)
            frame = await socket.receive()
            while frame["type"] != "error":
                frame = await socket.receive()
            codes.append(frame["code"])
            assert frame["code"] in SCHEMA["$defs"]["KnownErrorCode"]["enum"]
        assert codes == [code for _, _, code in BAD_FRAMES]
        await socket.close()

    async_to_sync(scenario)()


def test_a_frame_is_either_a_client_or_a_server_frame() -> None:
    FRAME.validate({"type": "attach"})
    FRAME.validate({"type": "status", "state": "idle", "message_id": None, "run_id": None, "epoch": 0, "index": 0})
    with pytest.raises(ValidationError):
        FRAME.validate({"type": "status"})


def test_the_reference_page_is_rendered_from_the_schema() -> None:
    """docs/reference/websocket-schema.md is what ``python -m tests.clients.render_schema_docs`` writes."""
    from tests.clients.render_schema_docs import PAGE_PATH, render

    assert PAGE_PATH.read_text() == render(), "Stale: run python -m tests.clients.render_schema_docs"
