"""Delivery to other processes: what the producer's process puts on a spanning channel layer."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from agent_persistence.realtime import delivery
from agent_persistence.runtime.hooks import StreamUpdate


class RecordingLayer:
    """Stands for channels-redis: records each group_send."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        self.sent.append((group, message))


@pytest.fixture
def layer(monkeypatch: pytest.MonkeyPatch) -> RecordingLayer:
    fake = RecordingLayer()
    monkeypatch.setattr(delivery, "get_channel_layer", lambda: fake)
    monkeypatch.setattr(delivery, "layer_spans_processes", lambda layer=None: True)
    return fake


async def test_deltas_then_the_seal_go_to_the_group_in_order_and_increments_only(layer: RecordingLayer) -> None:
    conversation_id, message_id, run_id = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    delivery.on_stream(StreamUpdate(conversation_id, message_id, run_id, 1, 1, "Hel", None))
    delivery.on_stream(StreamUpdate(conversation_id, message_id, run_id, 1, 2, "Hello", None))
    # The seal's signal fires in the database thread of the producer's loop.
    await sync_to_async(delivery.on_conversation_updated)(
        None, conversation_id=conversation_id, message_id=message_id, run_id=run_id
    )
    for _ in range(50):
        if len(layer.sent) >= 2 and layer.sent[-1][1]["payload"]["kind"] == "sealed":
            break
        await asyncio.sleep(0.01)
    payloads = [message["payload"] for _, message in layer.sent]
    text = "".join(payload["text"] for payload in payloads if payload["kind"] == "delta")
    assert text == "Hello"
    assert payloads[-1] == {"kind": "sealed", "conversation_id": str(conversation_id), "message_id": str(message_id), "run_id": str(run_id)}
    assert {group for group, _ in layer.sent} == {f"agent_persistence.conversation.{conversation_id.hex}"}
    assert all(message["origin"] == delivery.origin() for _, message in layer.sent)


def test_merged_deltas_keep_the_text_and_the_last_index() -> None:
    group = "g"
    base = {"kind": "delta", "message_id": "m", "run_id": "r", "epoch": 1, "tool_calls": None}
    batch = [
        (group, {"type": "t", "payload": {**base, "index": 1, "offset": 0, "text": "ab"}}),
        (group, {"type": "t", "payload": {**base, "index": 2, "offset": 2, "text": "cd"}}),
    ]
    ((_, merged),) = delivery.merge_updates(batch)
    assert merged["payload"]["text"] == "abcd" and merged["payload"]["index"] == 2 and merged["payload"]["offset"] == 0


class FailingLayer(RecordingLayer):
    """A layer that is down (Redis stopped) until ``up`` is set."""

    up = False

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        if not self.up:
            raise ConnectionError("Connection refused")
        await super().group_send(group, message)


async def test_after_a_failed_send_the_next_message_carries_the_whole_text(monkeypatch: pytest.MonkeyPatch) -> None:
    """So followers elsewhere catch up from the first message once the layer is back, without a read."""
    fake = FailingLayer()
    monkeypatch.setattr(delivery, "get_channel_layer", lambda: fake)
    monkeypatch.setattr(delivery, "layer_spans_processes", lambda layer=None: True)
    conversation_id, message_id, run_id = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    delivery.on_stream(StreamUpdate(conversation_id, message_id, run_id, 1, 1, "Hel", None))
    await asyncio.sleep(0.2)
    fake.up = True
    delivery.on_stream(StreamUpdate(conversation_id, message_id, run_id, 1, 2, "Hello", None))
    for _ in range(50):
        if fake.sent:
            break
        await asyncio.sleep(0.01)
    ((_, message),) = fake.sent
    assert message["payload"]["offset"] == 0 and message["payload"]["text"] == "Hello"
