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
