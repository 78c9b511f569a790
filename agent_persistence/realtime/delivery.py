"""Delivery of turn updates to the followers of a conversation.

Two paths, both carrying the producer's ``epoch`` and ``index`` so a follower
applies each update at most once and in order:

- the in-process :data:`hub`: producers run on the process's producer loop,
  consumers on the server's loop; the hub hands each update to every
  subscribed consumer with ``loop.call_soon_threadsafe``, once per loop for
  all that waits (the in-memory channel layer is not safe across loops). Hub updates carry the whole
  cumulative text (a reference, not a copy), so a follower never sees a gap.
- the channel layer, when it spans processes (any layer but
  ``InMemoryChannelLayer``, e.g. channels-redis): one sender task per event
  loop sends, one flush at a time and in order, everything queued since its
  previous flush as one message to the group of all relays
  (:data:`.groups.RELAYS_GROUP`), each update carrying only the text added
  since the previous update of that producer (``offset`` says where it
  goes). The layer's work therefore grows with flushes and processes, not
  with conversations or sockets. Sockets join no group: each process has one
  :class:`Relay` channel in that group, which hands the hub the updates of
  the conversations followed in this process. A process ignores its own
  messages (the hub served them), and a relay that finds a message missing
  (each carries its sender's sequence number) has its followers read.

When the layer does not span processes, or while the relay finds it down
(Redis stopped or restarted: :meth:`Relay.covers` is false), followers follow
the recording (see :mod:`.follower`). A layer failure never reaches a socket:
sends and receives that fail are logged once per outage and retried.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
import uuid
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable

from asgiref.sync import SyncToAsync, async_to_sync
from channels.layers import InMemoryChannelLayer, get_channel_layer

from ..runtime import hooks
from .groups import BATCH_TYPE, HANDOFFS_GROUP, PROBE_TYPE, RELAYS_GROUP, UPDATE_TYPE, conversation_group

logger = logging.getLogger(__name__)

#: Seconds between two probes of a relay (see :class:`Relay`).
PROBE_INTERVAL = 1.0
#: A relay whose probes have not come back for this long is down (and joins its groups again).
PROBE_TIMEOUT = 5.0
#: Seconds between two attempts to reach a layer that failed.
RETRY_INTERVAL = 0.5

_origin: tuple[int, str] = (0, "")


def origin() -> str:
    """This process on the layer (its own group messages come back to its relay and are ignored).

    Made per process id, so workers forked from one parent differ.
    """
    global _origin
    if _origin[0] != os.getpid():
        _origin = (os.getpid(), f"{os.getpid()}.{uuid.uuid4().hex}")
    return _origin[1]

Payload = dict[str, Any]


def layer_spans_processes(layer: Any = None) -> bool:
    layer = get_channel_layer() if layer is None else layer
    return layer is not None and not isinstance(layer, InMemoryChannelLayer)


@dataclass(eq=False)
class Subscription:
    conversation_id: uuid.UUID
    loop: asyncio.AbstractEventLoop
    callback: Callable[[Payload], None]


class Hub:
    """Thread-safe in-process fan-out of updates to the consumers of each conversation.

    What is published for the consumers of one loop waits in that loop's
    pending list, which one ``call_soon_threadsafe`` hands over: a producer
    loop that publishes the updates of hundreds of turns while the server's
    loop is busy wakes it once, not once per update, and each consumer still
    gets its updates in the order they were published.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._subscriptions: dict[uuid.UUID, list[Subscription]] = {}
        self._pending: dict[asyncio.AbstractEventLoop, list[tuple[Subscription, Payload]]] = {}

    def subscribe(self, conversation_id: uuid.UUID, callback: Callable[[Payload], None]) -> Subscription:
        """Call ``callback`` on the caller's loop with every update of the conversation."""
        subscription = Subscription(conversation_id, asyncio.get_running_loop(), callback)
        with self._lock:
            self._subscriptions.setdefault(conversation_id, []).append(subscription)
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        with self._lock:
            subscriptions = self._subscriptions.get(subscription.conversation_id, [])
            if subscription in subscriptions:
                subscriptions.remove(subscription)
            if not subscriptions:
                self._subscriptions.pop(subscription.conversation_id, None)

    def publish(self, conversation_id: uuid.UUID, payload: Payload) -> None:
        woken: list[asyncio.AbstractEventLoop] = []
        gone: list[Subscription] = []
        with self._lock:
            for subscription in self._subscriptions.get(conversation_id, ()):
                if subscription.loop.is_closed():  # its consumer is gone (also when a delivery was pending)
                    self._pending.pop(subscription.loop, None)
                    gone.append(subscription)
                    continue
                pending = self._pending.get(subscription.loop)
                if pending is None:
                    pending = self._pending[subscription.loop] = []
                    woken.append(subscription.loop)
                pending.append((subscription, payload))
        for loop in woken:
            try:
                loop.call_soon_threadsafe(self._deliver, loop)
            except RuntimeError:  # that loop closed just now: its consumers are gone
                with self._lock:
                    gone.extend(subscription for subscription, _ in self._pending.pop(loop, []))
        for subscription in gone:
            self.unsubscribe(subscription)

    def _deliver(self, loop: asyncio.AbstractEventLoop) -> None:
        """On ``loop``: hand its consumers what was published for them since the last call."""
        with self._lock:
            pending = self._pending.pop(loop, [])
        for subscription, payload in pending:
            try:
                subscription.callback(payload)
            except Exception:  # noqa: BLE001 - one consumer's failure is not another's
                logger.exception("A consumer of conversation %s failed on an update.", subscription.conversation_id)

    def count(self, conversation_id: uuid.UUID | None = None) -> int:
        """Subscriptions of the conversation (of every conversation when None)."""
        with self._lock:
            if conversation_id is None:
                return sum(len(subscriptions) for subscriptions in self._subscriptions.values())
            return len(self._subscriptions.get(conversation_id, ()))


hub = Hub()


class GroupSender:
    """Sends the layer messages of one event loop in order, one flush at a time.

    A flush takes every update queued since the previous one (under load the
    queue grows while a send is in flight, so flushes grow rather than fall
    behind; flushes start at least :data:`FLUSH_GAP` apart), merges each producer's consecutive deltas (:func:`merge_updates`)
    and sends them all, whatever their conversations, as one message to
    :data:`.groups.RELAYS_GROUP` (several, one after another, when the flush
    exceeds :data:`MAX_BATCH_UPDATES` updates or :data:`MAX_BATCH_TEXT`
    characters). Each message carries this sender's id and a ``sequence`` that
    grows by one per message, so a relay that misses one knows it. A seal is
    also sent to its conversation's group, and a hand-off to
    :data:`.groups.HANDOFFS_GROUP` (the reapers), after the batch that holds it.

    ``enqueued`` and ``flushed`` count the updates put (:meth:`put`) and the
    updates whose flush is over (sent or failed); both grow in queue order, so
    :meth:`drained` waits for a watermark, not for an empty queue, which a loop
    with other producers streaming never has.
    """

    #: Producers whose published length is remembered (oldest forgotten first).
    MAX_TRACKED = 10_000

    def __init__(self) -> None:
        self.queue: asyncio.Queue[tuple[str, dict[str, Any]]] = asyncio.Queue()
        self.published: OrderedDict[tuple[uuid.UUID, uuid.UUID, int], int] = OrderedDict()
        self.trouble = LayerTrouble("The group sender")
        self.sender_id = uuid.uuid4().hex
        self.sequence = 0
        self.enqueued = 0
        self.flushed = 0
        self.progress = asyncio.Event()  # set, and replaced, after each flush
        self.task = asyncio.get_running_loop().create_task(self._send_forever(), name="agent_persistence.group_sender")

    def put(self, item: tuple[str, dict[str, Any]]) -> None:
        """Queue one update (a group and its message) for the next flush; on the sender's loop."""
        self.queue.put_nowait(item)
        self.enqueued += 1

    def increment(self, update: hooks.StreamUpdate) -> tuple[int, str]:
        """The text added since this producer's previous update, and where it starts."""
        key = (update.conversation_id, update.message_id, update.epoch)
        start = self.published.pop(key, 0)
        if start > len(update.content):
            start = 0
        self.published[key] = len(update.content)
        while len(self.published) > self.MAX_TRACKED:
            self.published.popitem(last=False)
        return start, update.content[start:]

    async def _send_forever(self) -> None:
        layer = get_channel_layer()
        while True:
            batch = [await self.queue.get()]
            began = time.monotonic()
            while not self.queue.empty():
                batch.append(self.queue.get_nowait())
            try:
                failures = await self.flush(layer, merge_updates(batch))
            finally:
                for _ in batch:
                    self.queue.task_done()
                self.flushed += len(batch)
                progress, self.progress = self.progress, asyncio.Event()
                progress.set()
            for message, _ in failures:
                self.forget(message)
            if failures:  # followers elsewhere fill what is lost from the recording
                self.trouble.failed(failures[0][1])
            else:
                self.trouble.cleared()
            # Each flush costs every relay a receive; updates that come meanwhile wait for the next one.
            await asyncio.sleep(max(0.0, began + FLUSH_GAP - time.monotonic()))

    async def flush(self, layer: Any, updates: list[tuple[str, dict[str, Any]]]) -> list[tuple[dict[str, Any], BaseException]]:
        """Send one flush's updates (in order) to every relay, then its seals to their groups; what failed."""
        failures: list[tuple[dict[str, Any], BaseException]] = []
        for part in split_batch(updates):
            message = batch_message(self.sender_id, self.sequence, [update for _, update in part])
            self.sequence += 1  # also when the send fails: the relays see the gap and their followers read
            try:
                await layer.group_send(RELAYS_GROUP, message)
            except Exception as exc:  # noqa: BLE001 - reported to the caller, which logs it once per outage
                failures.extend((update, exc) for _, update in part)
        seals = [(group, [update]) for group, update in updates if update["payload"].get("kind") == "sealed"]
        handoffs = [update for _, update in updates if update["payload"].get("kind") == "handing_off"]
        if handoffs:  # after the batch: a survivor's followers hear of it (and of the last deltas) first
            seals.append((HANDOFFS_GROUP, [handoffs_message(handoffs)]))
        if seals:
            sent = await asyncio.gather(*(send_in_order(layer, group, messages) for group, messages in seals))
            failures.extend(failure for group_failures in sent for failure in group_failures)
        return failures

    async def drained(self) -> None:
        """Return once everything queued so far has been sent (or failed); what is queued later is not waited for."""
        target = self.enqueued
        while self.flushed < target and not self.task.done():
            await self.progress.wait()

    def forget(self, message: dict[str, Any]) -> None:
        """A message was lost: the producer's next one carries its whole text (from offset 0),
        so followers elsewhere catch up from it, without a read, once the layer is back."""
        payload = message.get("payload", {})
        if payload.get("kind") == "delta":
            key = (uuid.UUID(message["conversation_id"]), uuid.UUID(payload["message_id"]), payload["epoch"])
            self.published.pop(key, None)


#: Seconds from the start of one flush of a sender to the start of its next, at least.
FLUSH_GAP = 0.01
#: Updates in one message to the relays at most (a larger flush is split, the parts sent in order).
MAX_BATCH_UPDATES = 500
#: Characters of delta text in one message to the relays at most (an update larger than that goes alone).
MAX_BATCH_TEXT = 256 * 1024


def split_batch(updates: list[tuple[str, dict[str, Any]]]) -> list[list[tuple[str, dict[str, Any]]]]:
    """``updates`` in consecutive parts within :data:`MAX_BATCH_UPDATES` and :data:`MAX_BATCH_TEXT`."""
    parts: list[list[tuple[str, dict[str, Any]]]] = []
    part: list[tuple[str, dict[str, Any]]] = []
    size = 0
    for update in updates:
        text = len(update[1]["payload"].get("text") or "")
        if part and (len(part) >= MAX_BATCH_UPDATES or size + text > MAX_BATCH_TEXT):
            parts.append(part)
            part, size = [], 0
        part.append(update)
        size += text
    if part:
        parts.append(part)
    return parts


def batch_message(sender_id: str, sequence: int, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """One message to the relays: the updates of ``messages`` (made by :func:`group_message`), in order."""
    return {
        "type": BATCH_TYPE,
        "origin": origin(),
        "sender": sender_id,
        "sequence": sequence,
        "updates": [{"conversation_id": message["conversation_id"], "payload": message["payload"]} for message in messages],
    }


def handoffs_message(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """One message to the reapers for all the hand-offs of a flush (:func:`group_message` each, in order).

    A draining replica announces its thirty turns at once: one ``group_send`` each kept the last
    waiting for the twenty-nine before it, and each listener for as many receives.
    """
    return {"type": UPDATE_TYPE, "origin": origin(), "handoffs": messages}


async def send_in_order(layer: Any, group: str, messages: list[dict[str, Any]]) -> list[tuple[dict[str, Any], BaseException]]:
    """Send ``messages`` to ``group`` one after another; the ones that failed, with their errors."""
    failures = []
    for message in messages:
        try:
            await layer.group_send(group, message)
        except Exception as exc:  # noqa: BLE001 - reported to the caller, which logs it once per outage
            failures.append((message, exc))
    return failures


def merge_updates(batch: list[tuple[str, Payload]]) -> list[tuple[str, Payload]]:
    """Fewer messages, the same meaning, each group's in order.

    Consecutive deltas of one producer to one group become one delta (text
    concatenated); a delta that does not follow on from the group's previous
    delta replaces it (the newer one wins, followers fill gaps from the
    recording). Any other message (an activity, a seal) is kept as it is, and
    a delta after it starts anew.
    """
    merged: list[tuple[str, dict[str, Any]]] = []
    last_delta: dict[str, int] = {}  # group -> where in ``merged`` its last message is, while that is a delta
    for group, message in batch:
        payload = message["payload"]
        copied = (group, {**message, "payload": dict(payload)})
        at = last_delta.get(group)
        if payload.get("kind") != "delta":
            last_delta.pop(group, None)
            merged.append(copied)
            continue
        if at is None:
            last_delta[group] = len(merged)
            merged.append(copied)
            continue
        previous = merged[at][1]["payload"]
        same_producer = (previous["message_id"], previous["epoch"]) == (payload["message_id"], payload["epoch"])
        if same_producer and payload["offset"] == previous["offset"] + len(previous["text"]):
            previous.update(index=payload["index"], text=previous["text"] + payload["text"], tool_calls=payload["tool_calls"])
        else:
            merged[at] = copied
    return merged


_senders: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, GroupSender]" = weakref.WeakKeyDictionary()


async def drain() -> None:
    """Wait until this loop's group sender has sent what is queued (:func:`.hooks.flush_announcements`)."""
    current = _senders.get(asyncio.get_running_loop())
    if current is not None and not current.task.done():
        await current.drained()


def group_sender() -> GroupSender:
    loop = asyncio.get_running_loop()
    current = _senders.get(loop)
    if current is None or current.task.done():
        current = _senders[loop] = GroupSender()
    return current


class Relay:
    """This process's channel on the layer: receives every process's updates, hands the hub those followed here.

    The relay joins one group, :data:`.groups.RELAYS_GROUP`, whatever its
    sockets follow: a socket's connect or exit never waits on the layer, and
    a conversation is covered from the moment it is followed, with no join of
    its own to wait for. ``followers`` counts the sockets of each
    conversation in this process: the relay hands the hub the updates of
    those conversations only (the hub, those of its subscribers), and tells
    their followers when coverage changes.

    The keeper task proves the layer works: every :data:`PROBE_INTERVAL` it
    joins the group again (a restarted Redis has lost it; channels-redis also
    forgets members after its ``group_expiry``) and sends a probe to it. A
    probe of this relay that comes back, or any batch of this process's
    senders, shows that Redis answers and delivers to this relay; nothing of
    this process back for :data:`PROBE_TIMEOUT` (or any layer error) marks the
    relay down: meanwhile :meth:`covers` is false, so followers read the
    recording. Each change of coverage is told to the followers through the hub
    (a ``layer`` payload) so they read once and pick their pace.

    Each batch names its sender and carries a sequence that grows by one per
    message. A relay that finds one skipped (channels-redis drops what exceeds
    a channel's capacity; a send may fail midway) lost that message, whatever
    it held (deltas, an activity, a seal): it tells every follower here to
    read once, as when the layer comes back.
    """

    #: Senders whose last sequence is remembered (oldest forgotten first).
    MAX_SENDERS = 10_000

    def __init__(self, layer: Any = None) -> None:
        self.layer = get_channel_layer() if layer is None else layer
        self.channel: str | None = None
        self.followers: dict[uuid.UUID, int] = {}
        self.joined = False  # in RELAYS_GROUP since the layer was last seen working
        self.joins = 0  # times joined after being down; a probe counts for the join it was sent after
        self.healthy = False
        self.last_probe_back = 0.0
        self.sequences: OrderedDict[str, int] = OrderedDict()  # sender -> the last sequence received
        self.losses = 0  # batches found missing
        self.keeper: asyncio.Task[None] | None = None
        self.receiver: asyncio.Task[None] | None = None
        self.trouble = LayerTrouble("The relay")

    def covers(self, conversation_id: uuid.UUID) -> bool:
        """Whether updates of the conversation from other processes reach this process through the layer now."""
        return self.healthy and self.joined

    def follow(self, conversation_id: uuid.UUID) -> None:
        """One more socket of this process follows the conversation."""
        self._ensure_running()
        self.followers[conversation_id] = self.followers.get(conversation_id, 0) + 1

    def unfollow(self, conversation_id: uuid.UUID) -> None:
        """One socket fewer; the conversation's updates are no longer handed on when none remains."""
        remaining = self.followers.get(conversation_id, 0) - 1
        if remaining > 0:
            self.followers[conversation_id] = remaining
        else:
            self.followers.pop(conversation_id, None)

    def _ensure_running(self) -> None:
        if self.keeper is None or self.keeper.done():
            self.keeper = asyncio.get_running_loop().create_task(self._keep(), name="agent_persistence.relay.keeper")

    async def close(self) -> None:
        """Stop the relay's tasks (tests; a server's relay lives as long as its loop)."""
        for task in (self.keeper, self.receiver):
            if task is not None:
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass
        self.keeper = self.receiver = None

    # -- the keeper ---------------------------------------------------------------------------------

    async def _keep(self) -> None:
        if self.channel is None:
            # The default prefix: channels-redis reads all of a process's channels through one list.
            self.channel = await self.layer.new_channel()
        while True:
            if self.receiver is None or self.receiver.done():
                self.receiver = asyncio.get_running_loop().create_task(self._receive_forever(), name="agent_persistence.relay")
            if self.healthy and time.monotonic() - self.last_probe_back > PROBE_TIMEOUT:
                self.mark_down("no probe came back")
            try:
                await self.layer.group_add(RELAYS_GROUP, self.channel)
                if not self.joined:
                    self.joined = True
                    self.joins += 1
                await self.layer.group_send(RELAYS_GROUP, {"type": PROBE_TYPE, "origin": origin(), "join": self.joins})
                self.trouble.cleared()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the layer is down: followers read the recording meanwhile
                self.trouble.failed(exc)
                self.mark_down(f"{type(exc).__name__}")
            await asyncio.sleep(PROBE_INTERVAL if self.healthy else RETRY_INTERVAL)

    def mark_down(self, reason: str) -> None:
        """The layer failed, or may have lost this process's membership: join again."""
        self.joined = False
        if self.healthy:
            self.healthy = False
            logger.warning("The channel layer stopped delivering (%s): followers read the recording until it is back.", reason)
            self.notify(self.followers)

    def mark_up(self) -> None:
        if not self.healthy:
            self.healthy = True
            self.last_probe_back = time.monotonic()
            logger.info("The channel layer delivers again; %d conversations followed.", len(self.followers))
            self.notify(self.followers)

    def notify(self, conversation_ids: Any) -> None:
        """Tell the followers of these conversations that their coverage changed (or a message was lost)."""
        for conversation_id in list(conversation_ids):
            hub.publish(conversation_id, {"kind": "layer"})

    # -- the receiver ---------------------------------------------------------------------------------

    async def _receive_forever(self) -> None:
        me = origin()
        assert self.channel is not None
        while True:
            try:
                message = await self.layer.receive(self.channel)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the layer is down: followers read the recording meanwhile
                self.trouble.failed(exc)
                self.mark_down(f"{type(exc).__name__}")
                await asyncio.sleep(RETRY_INTERVAL)
                continue
            try:
                self.receive(message, me)
            except Exception:  # noqa: BLE001 - one bad message must not stop the relay
                logger.warning("The relay dropped a message it could not read.", exc_info=True)

    def receive(self, message: dict[str, Any], me: str) -> None:
        """One message from the group: this process's own proves delivery, another's goes to the hub."""
        kind = message.get("type")
        if message.get("origin") == me:  # the hub served this process's updates already
            if kind == PROBE_TYPE and message.get("join") == self.joins and self.joined:
                self.last_probe_back = time.monotonic()
                self.mark_up()
            elif kind == BATCH_TYPE and self.healthy:
                self.last_probe_back = time.monotonic()
            return
        if kind != BATCH_TYPE:
            return  # another relay's probe
        lost = self.missed_before(message["sender"], message["sequence"])
        followers = self.followers
        for update in message["updates"]:
            conversation_id = uuid.UUID(update["conversation_id"])
            if conversation_id in followers:
                payload = update["payload"]
                payload["relayed"] = True  # from another process (followers tell it from their own producers')
                hub.publish(conversation_id, payload)
        if lost:
            self.losses += 1
            logger.info("The relay missed a message of the channel layer: the followers of this process read the turn.")
            self.notify(followers)

    def missed_before(self, sender_id: str, sequence: int) -> bool:
        """Whether messages of ``sender_id`` came before this one and did not arrive (a first one counts as 0)."""
        previous = self.sequences.pop(sender_id, None)
        self.sequences[sender_id] = sequence
        while len(self.sequences) > self.MAX_SENDERS:
            self.sequences.popitem(last=False)
        return sequence != (0 if previous is None else previous + 1)


class LayerTrouble:
    """Logs a failing layer once per outage (with the error), and once when it works again."""

    def __init__(self, who: str) -> None:
        self.who = who
        self.failing = False

    def failed(self, exc: BaseException) -> None:
        if not self.failing:
            self.failing = True
            logger.warning("%s could not reach the channel layer: %r", self.who, exc)

    def cleared(self) -> None:
        if self.failing:
            self.failing = False
            logger.warning("%s reaches the channel layer again.", self.who)


_relays: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Relay]" = weakref.WeakKeyDictionary()


def relay() -> Relay:
    """The relay of the running loop (the server's)."""
    loop = asyncio.get_running_loop()
    current = _relays.get(loop)
    if current is None:
        current = _relays[loop] = Relay()
    return current


def group_message(conversation_id: uuid.UUID, payload: Payload) -> dict[str, Any]:
    return {"type": UPDATE_TYPE, "origin": origin(), "conversation_id": str(conversation_id), "payload": payload}


def delta_payload(update: hooks.StreamUpdate, offset: int, text: str) -> Payload:
    return {
        "kind": "delta",
        "message_id": str(update.message_id),
        "run_id": str(update.run_id),
        "epoch": update.epoch,
        "index": update.index,
        "offset": offset,
        "text": text,
        "tool_calls": update.tool_calls,
    }


def on_stream(update: hooks.StreamUpdate) -> None:
    """The runtime's stream listener: runs on the producer's loop for every published update."""
    hub.publish(update.conversation_id, delta_payload(update, 0, update.content))
    if layer_spans_processes():
        current = group_sender()
        offset, text = current.increment(update)
        current.put(
            (conversation_group(update.conversation_id), group_message(update.conversation_id, delta_payload(update, offset, text)))
        )


def on_activity(update: hooks.ActivityUpdate) -> None:
    """The runtime's activity listener: a saved activity row goes to every socket of the conversation, on every process."""
    payload = {"kind": "activity", "epoch": update.epoch, "activity": update.activity}
    hub.publish(update.conversation_id, payload)
    if layer_spans_processes():
        group_sender().put((conversation_group(update.conversation_id), group_message(update.conversation_id, payload)))


def handoff_payload(update: hooks.HandOff) -> Payload:
    """What followers and the other processes' reapers get of a hand-off: the turn, at the epoch it was released at."""
    return {
        "kind": "handing_off",
        "message_id": str(update.message_id),
        "run_id": str(update.run_id),
        "epoch": update.released_at,
        "from_epoch": update.epoch,
    }


def on_handoff(update: hooks.HandOff) -> None:
    """The runtime's hand-off listener (on the producer's loop, after the hand-off committed): followers everywhere
    see a ``handing_off`` status, and every other process's reaper hears of the turn (:mod:`.handoffs`)."""
    payload = handoff_payload(update)
    hub.publish(update.conversation_id, payload)
    if layer_spans_processes():
        group_sender().put((conversation_group(update.conversation_id), group_message(update.conversation_id, payload)))


def on_conversation_updated(sender: Any, *, conversation_id: uuid.UUID, message_id: uuid.UUID, run_id: uuid.UUID, **kwargs: Any) -> None:
    """``conversation_updated`` (a turn was sealed): tell every socket of the conversation, on every process.

    The seal runs in a worker thread of the producer's loop; the group message is
    queued on that loop's sender (after the turn's last delta) rather than sent
    from here, so the database thread never waits on the layer.
    """
    payload = {"kind": "sealed", "conversation_id": str(conversation_id), "message_id": str(message_id), "run_id": str(run_id)}
    view = hooks.sealed_view(message_id)
    # This process's followers apply the sealed turn the store announced (a read would return the
    # same rows); other processes' followers read it, since the layer carries ids only.
    hub.publish(conversation_id, payload if view is None else {**payload, "view": view})
    if not layer_spans_processes():
        return
    message = (conversation_group(conversation_id), group_message(conversation_id, payload))
    loop = _calling_loop()
    try:
        if loop is not None:
            loop.call_soon_threadsafe(lambda: group_sender().put(message))
        else:  # plain sync code (a management command): send it now
            async_to_sync(send_now)(*message)
    except Exception:  # noqa: BLE001 - followers elsewhere see the seal when they next read the turn
        logger.warning("Could not announce the end of turn %s", message_id, exc_info=True)


async def send_now(group: str, message: dict[str, Any]) -> None:
    """Send one update without a sender task: to the relays (a sender of its own), then to ``group``."""
    layer = get_channel_layer()
    await layer.group_send(RELAYS_GROUP, batch_message(uuid.uuid4().hex, 0, [message]))
    await layer.group_send(group, message)


def _calling_loop() -> asyncio.AbstractEventLoop | None:
    """The running loop of this thread, or the loop whose ``sync_to_async`` runs this thread."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        pass
    threadlocal = SyncToAsync.threadlocal
    if getattr(threadlocal, "main_event_loop_pid", None) != os.getpid():
        return None
    loop = getattr(threadlocal, "main_event_loop", None)
    return loop if loop is not None and loop.is_running() else None


def connect() -> None:
    """Register the listeners (``AppConfig.ready``); idempotent."""
    from ..signals import conversation_updated

    if on_stream not in hooks.stream_listeners:
        hooks.stream_listeners.append(on_stream)
    if on_activity not in hooks.activity_listeners:
        hooks.activity_listeners.append(on_activity)
    if drain not in hooks.announcement_flushers:
        hooks.announcement_flushers.append(drain)
    if on_handoff not in hooks.handoff_listeners:
        hooks.handoff_listeners.append(on_handoff)
    from .handoffs import claim_handed_off_turns

    if claim_handed_off_turns not in hooks.reaper_companions:
        hooks.reaper_companions.append(claim_handed_off_turns)
    conversation_updated.connect(on_conversation_updated, dispatch_uid="agent_persistence.realtime.conversation_updated")
