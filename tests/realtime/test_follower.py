"""The follower's bookkeeping, driven directly: live updates past a gap are held until the recording fills it."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model

from agent_persistence.realtime.follower import Follower, TurnView
from agent_persistence.scope import Scope
from tests.realtime.test_consumer import make_conversation

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]


async def test_updates_past_a_gap_are_applied_in_order_once_the_recording_fills_it() -> None:
    user = await sync_to_async(get_user_model().objects.create_user)("follower-alice")
    conversation_id = await sync_to_async(make_conversation)(user)
    frames: list[dict[str, Any]] = []

    async def send(frame: dict[str, Any]) -> None:
        frames.append(frame)

    follower = Follower(Scope(tenant="", user=str(user.pk)), conversation_id, send)
    message_id = uuid.uuid4()
    await follower.advance(message_id, 1, 1, 0, "ab", None)
    # Index 2 ("cd" at offset 2) was lost; 3 and 4 arrive past the gap and are held.
    await follower.advance(message_id, 1, 3, 4, "ef", None)
    await follower.advance(message_id, 1, 4, 6, "gh", None)
    assert follower.behind and follower.offset == 2
    # The recording, flushed after index 3: it fills the gap, and the held index 4 follows on at once.
    recording = {"epoch": 1, "index": 3, "message": {"role": "assistant", "content": "abcdef"}}
    await follower.apply_view(TurnView(state="alive", message_id=message_id, run_id=None, epoch=1, record=recording))
    deltas = [frame for frame in frames if frame["type"] == "delta"]
    assert "".join(frame["text"] for frame in deltas) == "abcdefgh"
    assert [frame["index"] for frame in deltas] == [1, 3, 4]
    assert not follower.behind and follower.held == [] and follower.offset == 8
    await follower.close()


async def test_a_follower_fed_by_a_producer_of_its_process_does_not_read_when_the_layer_changes() -> None:
    """The layer going down or losing a message changes nothing for a turn that this process's hub feeds
    (hundreds of such followers reading at once made an overloaded server collapse); a follower fed
    through the relay reads once."""
    user = await sync_to_async(get_user_model().objects.create_user)("follower-bob")
    conversation_id = await sync_to_async(make_conversation)(user)

    async def send(frame: dict[str, Any]) -> None:
        pass

    follower = Follower(Scope(tenant="", user=str(user.pk)), conversation_id, send)
    message_id = uuid.uuid4()
    follower.message_id, follower.state = message_id, "alive"
    base = {"kind": "delta", "message_id": str(message_id), "run_id": None, "epoch": 1, "tool_calls": None}
    await follower.apply_payload({**base, "index": 1, "offset": 0, "text": "ab"})  # the hub's, from a producer here
    await follower.apply_payload({"kind": "layer"})
    assert not follower.read_requested
    follower.last_local -= 2.0  # DEAD_AFTER / 2 (1.5 s) without an update of its own: the turn may have moved
    await follower.apply_payload({"kind": "layer"})
    assert follower.read_requested
    follower.read_requested = False
    await follower.apply_payload({**base, "index": 2, "offset": 2, "text": "cd", "relayed": True})  # another process's
    await follower.apply_payload({"kind": "layer"})
    assert follower.read_requested and follower.offset == 4
    await follower.close()


async def test_a_seal_from_this_process_is_applied_from_its_view_and_one_over_the_layer_is_read() -> None:
    """The hub's sealed payload carries the store's view of the sealed turn: the follower sends
    ``final`` from it without a read (the database here holds no turn at all, so a read would
    say idle). The layer's carries ids only: that one is read."""
    user = await sync_to_async(get_user_model().objects.create_user)("follower-carol")
    conversation_id = await sync_to_async(make_conversation)(user)
    frames: list[dict[str, Any]] = []

    async def send(frame: dict[str, Any]) -> None:
        frames.append(frame)

    follower = Follower(Scope(tenant="", user=str(user.pk)), conversation_id, send)
    message_id, run_id = uuid.uuid4(), uuid.uuid4()
    base = {"kind": "delta", "message_id": str(message_id), "run_id": str(run_id), "epoch": 1, "tool_calls": None}
    await follower.apply_payload({**base, "index": 1, "offset": 0, "text": "the answer"})
    final = {"message": {"role": "assistant", "content": "the answer"}, "stop_reason": "completed", "error": None}
    view = TurnView(state="done", message_id=message_id, run_id=run_id, epoch=1, final=final)
    sealed = {"kind": "sealed", "conversation_id": str(conversation_id), "message_id": str(message_id), "run_id": str(run_id)}
    await follower.apply_payload({**sealed, "view": view})
    assert [frame["type"] for frame in frames] == ["status", "delta", "final", "status", "conversation_updated"]
    assert frames[2]["message"] == final["message"] and frames[3]["state"] == "done"
    del frames[:]
    await follower.apply_payload({**sealed, "relayed": True})  # over the layer: read, and the database says idle
    assert [(frame["type"], frame.get("state")) for frame in frames] == [("status", "idle")]
    await follower.close()
