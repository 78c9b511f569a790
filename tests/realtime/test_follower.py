"""The follower's bookkeeping, driven directly: live updates past a gap are held until the recording fills it."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model

from agent_persistence.realtime.follower import Follower, TurnView
from agent_persistence.scope import Scope
from tests.realtime.test_consumer import make_conversation

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]


async def recording_follower(username: str) -> tuple[Follower, list[dict[str, Any]]]:
    """A follower of a new conversation of a new user, and the list of the frames it sends."""
    user = await sync_to_async(get_user_model().objects.create_user)(username)
    conversation_id = await sync_to_async(make_conversation)(user)
    frames: list[dict[str, Any]] = []

    async def send(frame: dict[str, Any]) -> None:
        frames.append(frame)

    return Follower(Scope(tenant="", user=str(user.pk)), conversation_id, send), frames


async def test_updates_past_a_gap_are_applied_in_order_once_the_recording_fills_it() -> None:
    follower, frames = await recording_follower("follower-alice")
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
    follower, _ = await recording_follower("follower-bob")
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
    follower, frames = await recording_follower("follower-carol")
    message_id, run_id = uuid.uuid4(), uuid.uuid4()
    base = {"kind": "delta", "message_id": str(message_id), "run_id": str(run_id), "epoch": 1, "tool_calls": None}
    await follower.apply_payload({**base, "index": 1, "offset": 0, "text": "the answer"})
    final = {"message": {"role": "assistant", "content": "the answer"}, "stop_reason": "completed", "error": None}
    view = TurnView(state="done", message_id=message_id, run_id=run_id, epoch=1, final=final)
    sealed = {"kind": "sealed", "conversation_id": str(follower.conversation_id), "message_id": str(message_id), "run_id": str(run_id)}
    await follower.apply_payload({**sealed, "view": view})
    assert [frame["type"] for frame in frames] == ["status", "delta", "final", "status", "conversation_updated"]
    assert frames[2]["message"] == final["message"] and frames[3]["state"] == "done"
    del frames[:]
    await follower.apply_payload({**sealed, "relayed": True})  # over the layer: read, and the database says idle
    assert [(frame["type"], frame.get("state")) for frame in frames] == [("status", "idle")]
    await follower.close()


async def test_a_follower_behind_sends_the_deltas_queued_for_it_as_one_frame_in_order() -> None:
    """Deltas that queued up while the loop was busy go out as one frame (the hub's carry the whole
    text, the layer's follow on); a delta of another turn, a gap or an activity ends the merge and is
    applied next, in order."""
    follower, frames = await recording_follower("follower-dave")
    message_id = uuid.uuid4()
    follower.message_id, follower.state = message_id, "alive"
    follower.last_read = follower.last_live = time.monotonic() + 3600  # no read comes due
    hub = {"kind": "delta", "message_id": str(message_id), "run_id": None, "epoch": 1, "tool_calls": None, "offset": 0}
    layer = {**hub, "relayed": True}
    for payload in [
        {**hub, "index": 1, "text": "a"}, {**hub, "index": 2, "text": "ab"}, {**hub, "index": 3, "text": "abc"},
        {**layer, "index": 4, "offset": 3, "text": "d"}, {**layer, "index": 5, "offset": 4, "text": "e"},  # all one frame
        {**layer, "index": 7, "offset": 9, "text": "z"},  # past a gap: held, not merged
        {"kind": "activity", "epoch": 1, "activity": {"id": "x", "revision": 1, "message_id": str(message_id), "run_id": None}},
    ]:
        follower.push(payload)
    follower.task = asyncio.get_running_loop().create_task(follower.follow())
    for _ in range(50):
        await asyncio.sleep(0.01)
        if follower.queue.empty() and follower.carried is None and len(frames) >= 2:
            break
    assert [(frame["type"], frame.get("index"), frame.get("text")) for frame in frames] == [
        ("delta", 5, "abcde"), ("activity", None, None),
    ]
    assert follower.offset == 5 and [held.index for held in follower.held] == [7]
    await follower.close()


def test_deltas_merge_only_when_the_second_follows_on_from_the_first() -> None:
    from agent_persistence.realtime.follower import MAX_COALESCED_TEXT, merge_deltas

    base = {"kind": "delta", "message_id": "m", "run_id": None, "epoch": 2, "tool_calls": None}
    first = {**base, "index": 4, "offset": 10, "text": "abc"}
    assert merge_deltas(first, {**base, "index": 5, "offset": 13, "text": "d", "tool_calls": [{"id": 1}]}) == {
        **base, "index": 5, "offset": 10, "text": "abcd", "tool_calls": [{"id": 1}], "relayed": False,
    }
    assert merge_deltas(first, {**base, "index": 5, "offset": 0, "text": "x" * 14})["text"] == "x" * 14  # the hub's: whole text
    assert merge_deltas(first, {**base, "index": 5, "offset": 14, "text": "d"}) is None  # a gap
    assert merge_deltas(first, {**base, "index": 5, "offset": 0, "text": "short"}) is None  # reaches less far
    assert merge_deltas(first, {**base, "index": 4, "offset": 13, "text": "d"}) is None  # not newer
    assert merge_deltas(first, {**base, "index": 5, "offset": 13, "text": "d", "epoch": 3}) is None  # another producer
    assert merge_deltas(first, {**base, "index": 5, "offset": 13, "text": "d", "message_id": "n"}) is None  # another turn
    assert merge_deltas(first, {"kind": "sealed", "message_id": "m"}) is None
    assert merge_deltas(first, {**base, "index": 5, "offset": 13, "text": "d" * MAX_COALESCED_TEXT}) is None  # too big
    assert merge_deltas({**first, "relayed": True}, {**base, "index": 5, "offset": 13, "text": "d", "relayed": True})["relayed"]
