"""Activity rows over the websocket: live while the agent saves them, on attach, and when followers read.

Real sockets on the real consumer, real producers on the process's producer
loop and the real test database. Every server frame is validated against the
protocol's JSON Schema (``protocol.schema.json``).
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.contrib.auth import get_user_model

from agent_persistence.realtime import delivery
from agent_persistence.realtime.follower import Follower
from agent_persistence.runtime.agents import Agent
from agent_persistence.runtime.turn import Turn
from agent_persistence.scope import Scope
from agent_persistence.stores import activity_store, conversation_store
from agent_persistence.testing.family import claim_at, orm_stores
from tests.realtime.client import StreamClient
from tests.test_protocol_schema import close_producer_connections, connect, make_conversation, server_frame_errors  # noqa: F401

ANSWER = "Searching. Found three. Done."


class SearchingAgent(Agent):
    """Streams an answer with a search progress card that it updates, and one activity the store refuses."""

    async def run(self, turn: Turn) -> None:
        turn.stream("Searching. ")
        await turn.activity("search", "web_search", {"query": "django", "found": 0})
        await asyncio.sleep(0.01)
        turn.stream("Found three. ")
        await turn.activity("search", "web_search", {"query": "django", "found": 3}, metadata={"source": "tool"})
        # A NUL the JSON policy refuses: the save fails, the turn does not.
        refused = await turn.activity("broken", "web_search", {"text": "nul \x00"})
        turn.state["refused"] = str(refused)
        turn.stream("Done.")


@pytest.fixture
def owner() -> Any:
    return get_user_model().objects.create_user("activity-alice")


@pytest.fixture
def searching_agent(settings: Any) -> None:
    settings.AGENT_PERSISTENCE = {
        **settings.AGENT_PERSISTENCE,
        "AGENTS": {**settings.AGENT_PERSISTENCE["AGENTS"], "searching": "tests.realtime.test_activity_frames.SearchingAgent"},
    }


def activity_frames(frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [frame for frame in frames if frame["type"] == "activity"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(90)
def test_followers_get_activity_frames_live_and_on_attach_and_a_failed_save_does_not_fail_the_turn(
    owner: Any, searching_agent: None
) -> None:
    async def scenario() -> None:
        conversation_id = await sync_to_async(make_conversation)(owner, "searching")
        live = await connect(conversation_id, owner)
        await live.send({"type": "attach"})
        await live.receive()
        await live.send({"type": "start", "content": "find django"})
        client = await live.follow(StreamClient())
        assert client.final_text == ANSWER and client.final["stop_reason"] == "completed"
        frames = activity_frames(live.received)
        assert [(frame["content"]["found"], frame["revision"]) for frame in frames] == [(0, 1), (3, 2)]
        assert len({frame["id"] for frame in frames}) == 1
        assert frames[-1]["message_id"] == client.message_id and frames[-1]["metadata"] == {"source": "tool"}
        # The activity of a turn is sent before the turn's final frame.
        assert live.received.index(frames[-1]) < live.received.index(client.final)

        late = await connect(conversation_id, owner)
        await late.send({"type": "attach"})
        late_client = await late.follow(StreamClient())
        (caught_up,) = activity_frames(late.received)
        assert (caught_up["id"], caught_up["content"], caught_up["revision"]) == (frames[-1]["id"], {"query": "django", "found": 3}, 2)
        assert late_client.final_text == ANSWER
        await live.close(), await late.close()
        for frame in live.received + late.received:
            assert not server_frame_errors(frame), frame

        scope = Scope(tenant="", user=str(owner.pk))
        rows = await sync_to_async(activity_store().list)(scope, conversation_id)
        assert [(str(row.activity_id), row.content) for row in rows] == [(frames[-1]["id"], {"query": "django", "found": 3})]
        transcript = await sync_to_async(conversation_store().list_messages)(scope, conversation_id)
        assert [message.role for message in transcript.items] == ["user", "assistant"]
        assert transcript.items[1].content == ANSWER  # the model's transcript holds no activity

    async_to_sync(scenario)()


@pytest.mark.django_db(transaction=True)
def test_a_follower_no_layer_covers_reads_the_turns_activities_with_the_turn() -> None:
    """Without a spanning layer, a follower learns other processes' activity rows from its reads."""
    scope = Scope("acme", "alice")
    stores = orm_stores()
    conversation = stores.conversations.create(scope)
    message_id = uuid.uuid4()
    claim_at(stores, conversation, 1, message_id=message_id)
    stores.activities.put(scope, conversation.pk, {"id": uuid.uuid4(), "activity_type": "web_search",
                                                   "content": {"found": 1}, "message_id": message_id}, epoch=1)
    stores.activities.put(scope, conversation.pk, {"activity_type": "other_turn", "message_id": uuid.uuid4()})

    async def scenario() -> list[dict[str, Any]]:
        sent: list[dict[str, Any]] = []

        async def send(frame: dict[str, Any]) -> None:
            sent.append(frame)

        follower = Follower(scope, conversation.pk, send)
        await follower.read()
        while not follower.queue.empty():
            await follower.apply_payload(follower.queue.get_nowait())
        await follower.read()  # the same again: nothing new is sent
        while not follower.queue.empty():
            await follower.apply_payload(follower.queue.get_nowait())
        await follower.close()
        return sent

    sent = async_to_sync(scenario)()
    activities = activity_frames(sent)
    assert [(frame["activity_type"], frame["content"], frame["message_id"]) for frame in activities] == [
        ("web_search", {"found": 1}, str(message_id))
    ]
    assert not [error for frame in sent for error in server_frame_errors(frame)]


def test_merged_layer_messages_keep_an_activity_between_deltas_in_order() -> None:
    group = "g"
    base = {"kind": "delta", "message_id": "m", "run_id": "r", "epoch": 1, "tool_calls": None}
    activity = {"kind": "activity", "epoch": 1, "activity": {"id": "a", "revision": 1}}
    batch = [
        (group, {"type": "t", "payload": {**base, "index": 1, "offset": 0, "text": "ab"}}),
        (group, {"type": "t", "payload": {**base, "index": 2, "offset": 2, "text": "cd"}}),
        (group, {"type": "t", "payload": activity}),
        (group, {"type": "t", "payload": {**base, "index": 3, "offset": 4, "text": "ef"}}),
        ("other", {"type": "t", "payload": {"kind": "sealed", "message_id": "m"}}),
    ]
    merged = [(name, message["payload"]) for name, message in delivery.merge_updates(batch)]
    assert [(name, payload["kind"], payload.get("text")) for name, payload in merged] == [
        (group, "delta", "abcd"), (group, "activity", None), (group, "delta", "ef"), ("other", "sealed", None),
    ]
