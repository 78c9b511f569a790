"""flush_announcements waits for what was queued when it was called, not for an empty queue (review of 5433ed5).

A process whose loop runs other producers (a server) gets new deltas during every flush and every
FLUSH_GAP sleep, so a wait for an empty queue never ends early: every turn end and every dead-turn
cancel waited the whole FLUSH_TIMEOUT and logged a warning. Real channels-redis layer (REDIS_URL).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from agent_persistence.realtime import delivery
from agent_persistence.realtime.groups import RELAYS_GROUP, conversation_group
from agent_persistence.runtime import hooks
from agent_persistence.runtime.hooks import StreamUpdate

REDIS_URL = os.environ.get("REDIS_URL")
#: Turns streaming on the loop meanwhile (a server's producer loop runs many: deltas come at any moment).
PRODUCERS = 1

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.skipif(not REDIS_URL and not os.environ.get("CI"), reason="REDIS_URL is not set"),
]


@pytest.fixture
def redis_layer(monkeypatch: pytest.MonkeyPatch) -> Any:
    if not REDIS_URL:
        pytest.fail("CI is set but REDIS_URL is not: this test needs Redis.")
    from channels_redis.core import RedisChannelLayer

    class SentLayer(RedisChannelLayer):
        """channels-redis, noting each group message once Redis has taken it."""

        sent: list[tuple[str, dict[str, Any]]]

        async def group_send(self, group: str, message: dict[str, Any]) -> None:
            await super().group_send(group, message)
            self.sent.append((group, message))

    layer = SentLayer(hosts=[REDIS_URL])
    layer.sent = []
    monkeypatch.setattr(delivery, "get_channel_layer", lambda: layer)
    return layer


async def test_a_flush_returns_once_its_seal_left_while_another_producer_streams(
    redis_layer: Any, caplog: pytest.LogCaptureFixture
) -> None:
    assert delivery.layer_spans_processes(redis_layer)
    stop = asyncio.Event()

    async def stream(conversation_id: uuid.UUID) -> None:
        """Another turn on the same loop, a delta at every turn of the loop (also while a flush awaits Redis)."""
        while not stop.is_set():
            message_id, run_id, text = uuid.uuid4(), uuid.uuid4(), ""
            for index in range(1, 200):
                text += f"{index};"
                delivery.on_stream(StreamUpdate(conversation_id, message_id, run_id, 1, index, text, None))
                await asyncio.sleep(0)

    producers = [asyncio.get_running_loop().create_task(stream(uuid.uuid4())) for _ in range(PRODUCERS)]
    conversation_id, message_id, run_id = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    try:
        await asyncio.sleep(0.2)  # the sender is busy with the stream
        # The seal's signal fires in a database thread of the loop, as in the store's seal.
        await sync_to_async(delivery.on_conversation_updated)(
            None, conversation_id=conversation_id, message_id=message_id, run_id=run_id
        )
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="agent_persistence.runtime.hooks"):
            began = time.monotonic()
            await hooks.flush_announcements()
            took = time.monotonic() - began
            # It waited for the seal: Redis has it, in a batch to the relays and alone to its conversation's group.
            seal_sent = [group for group, message in list(redis_layer.sent) if _holds_seal(message, message_id)]
    finally:
        stop.set()
        await asyncio.gather(*producers)
        await hooks.flush_announcements()
        await redis_layer.flush()
        await redis_layer.close_pools()
    assert RELAYS_GROUP in seal_sent and conversation_group(conversation_id) in seal_sent, seal_sent
    assert took < 1.0, f"flush_announcements took {took:.2f} s with other producers streaming"
    assert not [record for record in caplog.records if record.name == "agent_persistence.runtime.hooks"], caplog.records


def _holds_seal(message: dict[str, Any], message_id: uuid.UUID) -> bool:
    payloads = [update["payload"] for update in message.get("updates", [])] + [message.get("payload") or {}]
    return any(payload.get("kind") == "sealed" and payload.get("message_id") == str(message_id) for payload in payloads)
