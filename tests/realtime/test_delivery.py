"""Delivery to other processes: what the producer's process puts on a spanning channel layer (one numbered message per flush)."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from agent_persistence.realtime import delivery
from agent_persistence.realtime.groups import BATCH_TYPE, RELAYS_GROUP, UPDATE_TYPE, conversation_group
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


def batches(layer: RecordingLayer) -> list[dict[str, Any]]:
    return [message for group, message in layer.sent if group == RELAYS_GROUP]


def relayed_payloads(layer: RecordingLayer) -> list[dict[str, Any]]:
    return [update["payload"] for message in batches(layer) for update in message["updates"]]


async def wait_for_seal(layer: RecordingLayer) -> None:
    for _ in range(100):
        if any(payload["kind"] == "sealed" for payload in relayed_payloads(layer)) and len(layer.sent) > len(batches(layer)):
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"no seal sent: {layer.sent}")


async def test_deltas_then_the_seal_go_to_the_relays_in_order_and_increments_only(layer: RecordingLayer) -> None:
    """Every update goes to the relays' group, numbered; the seal also goes to the conversation's group, after it."""
    conversation_id, message_id, run_id = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    delivery.on_stream(StreamUpdate(conversation_id, message_id, run_id, 1, 1, "Hel", None))
    await asyncio.sleep(0.05)  # a flush of its own
    delivery.on_stream(StreamUpdate(conversation_id, message_id, run_id, 1, 2, "Hello", None))
    # The seal's signal fires in the database thread of the producer's loop.
    await sync_to_async(delivery.on_conversation_updated)(
        None, conversation_id=conversation_id, message_id=message_id, run_id=run_id
    )
    await wait_for_seal(layer)
    payloads = relayed_payloads(layer)
    assert [(payload["offset"], payload["text"]) for payload in payloads if payload["kind"] == "delta"] == [(0, "Hel"), (3, "lo")]
    sealed = {"kind": "sealed", "conversation_id": str(conversation_id), "message_id": str(message_id), "run_id": str(run_id)}
    assert payloads[-1] == sealed
    assert {update["conversation_id"] for message in batches(layer) for update in message["updates"]} == {str(conversation_id)}
    sequences = [message["sequence"] for message in batches(layer)]
    assert sequences == list(range(len(sequences))) and len(sequences) >= 2
    assert len({message["sender"] for message in batches(layer)}) == 1
    # The conversation's own group gets the seal alone (SPEC: the event is broadcast to it), after the batch that holds it.
    group, message = layer.sent[-1]
    assert group == conversation_group(conversation_id) and message["payload"] == sealed and message["type"] == UPDATE_TYPE
    assert [group for group, _ in layer.sent].count(conversation_group(conversation_id)) == 1
    assert all(message["origin"] == delivery.origin() for _, message in layer.sent)


async def test_a_flush_of_many_conversations_is_one_message(layer: RecordingLayer) -> None:
    """The layer's work grows with flushes, not conversations: 300 turns' updates queued at once are sent once."""
    updates = [StreamUpdate(uuid.uuid4(), uuid.uuid4(), uuid.uuid4(), 1, 1, f"text {i}", None) for i in range(300)]
    for update in updates:
        delivery.on_stream(update)
    for _ in range(100):
        if layer.sent:
            break
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)
    ((group, message),) = layer.sent
    assert group == RELAYS_GROUP and message["type"] == BATCH_TYPE
    assert [(update["conversation_id"], update["payload"]["text"]) for update in message["updates"]] == [
        (str(update.conversation_id), update.content) for update in updates
    ]


def test_a_large_flush_is_split_into_bounded_parts_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(delivery, "MAX_BATCH_UPDATES", 4)
    monkeypatch.setattr(delivery, "MAX_BATCH_TEXT", 10)
    texts = ["a", "b", "c", "d", "e", "0123456789abc", "f", "ghijklmno", "p"]
    updates = [("g", {"payload": {"kind": "delta", "text": text}}) for text in texts]
    updates.insert(2, ("g", {"payload": {"kind": "sealed"}}))
    parts = delivery.split_batch(updates)
    assert [update for part in parts for update in part] == updates
    assert [[update[1]["payload"].get("text") for update in part] for part in parts] == [
        ["a", "b", None, "c"], ["d", "e"], ["0123456789abc"], ["f", "ghijklmno"], ["p"],
    ]


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


async def test_after_a_failed_send_the_next_message_carries_the_whole_text_and_the_next_sequence(monkeypatch: pytest.MonkeyPatch) -> None:
    """So followers elsewhere catch up from the first message once the layer is back, without a read,
    and the relays see that a message is missing (sequence 1 follows none they received)."""
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
    ((group, message),) = fake.sent
    ((update,),) = [message["updates"]]
    assert group == RELAYS_GROUP and message["sequence"] == 1
    assert update["payload"]["offset"] == 0 and update["payload"]["text"] == "Hello"


async def test_the_hub_wakes_a_busy_loop_once_for_what_waits_and_keeps_the_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """1,000 updates of 10 conversations, published from another thread (a producer loop) while this loop is busy:
    one call_soon_threadsafe hands them all over, and each consumer gets its own in order."""
    hub = delivery.Hub()
    conversations = [uuid.uuid4() for _ in range(10)]
    received: dict[uuid.UUID, list[int]] = {conversation_id: [] for conversation_id in conversations}
    for conversation_id in conversations:
        hub.subscribe(conversation_id, lambda payload, conversation_id=conversation_id: received[conversation_id].append(payload["n"]))
    loop = asyncio.get_running_loop()
    wakes = []
    real = loop.call_soon_threadsafe
    monkeypatch.setattr(loop, "call_soon_threadsafe", lambda *args: (wakes.append(args), real(*args))[1])

    def produce() -> None:
        for n in range(1000):
            hub.publish(conversations[n % 10], {"n": n})

    producer = threading.Thread(target=produce)
    producer.start()
    producer.join()  # this loop is busy meanwhile: it runs nothing until the thread is done
    await asyncio.sleep(0.05)
    assert len(wakes) == 1
    assert all(received[conversation_id] == list(range(i, 1000, 10)) for i, conversation_id in enumerate(conversations))
    hub.publish(conversations[0], {"n": 1000})  # a later update wakes it again
    await asyncio.sleep(0.05)
    assert len(wakes) == 2 and received[conversations[0]][-1] == 1000


async def test_flushes_start_at_least_a_flush_gap_apart_and_lose_nothing(layer: RecordingLayer) -> None:
    """A producer streaming every millisecond for 0.5 s: at most one message per FLUSH_GAP (10 ms), the whole text."""
    conversation_id, message_id, run_id = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    text = ""
    began = time.monotonic()
    index = 0
    while time.monotonic() - began < 0.5:
        index += 1
        text += f"{index};"
        delivery.on_stream(StreamUpdate(conversation_id, message_id, run_id, 1, index, text, None))
        await asyncio.sleep(0.001)
    await asyncio.sleep(0.1)
    assert len(batches(layer)) <= 0.6 / delivery.FLUSH_GAP + 2, len(batches(layer))
    payloads = relayed_payloads(layer)
    assert "".join(payload["text"] for payload in payloads) == text and payloads[-1]["index"] == index


def test_the_hub_forgets_the_consumers_of_a_closed_loop_also_with_a_delivery_pending() -> None:
    hub = delivery.Hub()
    conversation_id = uuid.uuid4()
    loop = asyncio.new_event_loop()

    async def subscribe() -> None:
        hub.subscribe(conversation_id, lambda payload: None)

    loop.run_until_complete(subscribe())
    hub.publish(conversation_id, {"n": 1})  # scheduled on the loop, which never runs it
    loop.close()
    hub.publish(conversation_id, {"n": 2})
    assert hub.count(conversation_id) == 0 and hub._pending == {}


async def test_the_hub_gets_the_stores_view_of_an_announced_seal_and_the_layer_ids_only(layer: RecordingLayer) -> None:
    """During the store's announcement the receiver hands this process's followers the sealed turn's view;
    the signal's own arguments and what goes over the layer stay ids only."""
    from agent_persistence.realtime.delivery import hub
    from agent_persistence.runtime import hooks
    from agent_persistence.stores.protocols import TurnView

    conversation_id, message_id, run_id = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    view = TurnView(state="done", message_id=message_id, run_id=run_id, epoch=1, final={"message": {}, "stop_reason": "completed", "error": None})
    received: list[dict[str, Any]] = []
    subscription = hub.subscribe(conversation_id, received.append)
    try:
        def announce() -> None:
            with hooks.sealing(view):
                delivery.on_conversation_updated(None, conversation_id=conversation_id, message_id=message_id, run_id=run_id)
            # Another sender of the signal (no announcement in progress): ids only, the follower reads.
            delivery.on_conversation_updated(None, conversation_id=conversation_id, message_id=message_id, run_id=run_id)

        await sync_to_async(announce)()
        await wait_for_seal(layer)
        for _ in range(100):
            if len(received) == 2:
                break
            await asyncio.sleep(0.01)
    finally:
        hub.unsubscribe(subscription)
    assert [payload.get("view") for payload in received] == [view, None]
    assert all("view" not in payload for payload in relayed_payloads(layer))
