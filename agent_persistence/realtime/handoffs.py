"""Claiming the turns other processes hand off at their shutdown, as soon as they announce them.

A process that shuts down releases each turn it still drives as ``handed_off`` and sends the
turn to :data:`.groups.HANDOFFS_GROUP` (:func:`.delivery.on_handoff`, after the batch that
carries the turn's last deltas; the hand-offs of one flush in one message,
:func:`.delivery.handoffs_message`). Every process whose reaper runs (``REAPER_ENABLED``) listens
on that group beside its reaper (a reaper companion, :data:`agent_persistence.runtime.hooks.reaper_companions`,
so on the reaper's loop and for as long as it runs) and, for each turn it hears of:

1. tells its own followers of the conversation (a ``handing_off`` status), before anything of
   the new producer can reach them;
2. resumes the turn here (:func:`agent_persistence.runtime.lifecycle.take_handed_off_many`, this
   process's share of the announcement in one call) if it is
   the turn's claimant: of the listeners it has heard (each says so on the group when it joins and
   every :data:`REJOIN_INTERVAL`, :class:`Listeners`), the announcer left out, and of those the ones
   that drive turns themselves if any (with ``TURN_RUNNER = "tasks"`` the workers, not the web
   replicas, whose claim would go through the queue), the one that
   rendezvous hashing picks for the turn, so the listeners split a replica's turns among them
   instead of all claiming every one (each claim but one was refused by the turn store, after
   waiting on the winner's row lock, on CPU the survivors were short of). The others try it too,
   :data:`BACKUP_DELAY` later (the claimant may have died or be draining itself): the turn store
   admits one, and a turn already taken is refused (Busy) at once.

Without a layer that spans processes nothing is announced: the reapers' sweeps list handed-off
turns at once (no ``DEAD_AFTER`` to wait for), so a turn is resumed within ``REAPER_INTERVAL``.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
import uuid
from typing import Any

from channels.layers import get_channel_layer

from ..runtime.lifecycle import drives_turns, take_handed_off_many
from .delivery import RETRY_INTERVAL, LayerTrouble, hub, layer_spans_processes, origin
from .groups import HANDOFFS_GROUP

logger = logging.getLogger(__name__)

#: Seconds between two joins of the group (a restarted Redis forgot the membership); each says "listening".
REJOIN_INTERVAL = 5.0
#: Seconds a listener counts another as listening after last hearing it say so (three joins).
PRESENCE_TTL = 3 * REJOIN_INTERVAL
#: Seconds a listener waits before it claims a turn another listener is the claimant of.
BACKUP_DELAY = 1.0
#: The longest origin a presence message may name (a process's is about 40 characters); longer ones are ignored.
MAX_ORIGIN_LENGTH = 200


class Listeners:
    """The hand-off listeners this one has heard on the group, and which of them claims a turn first."""

    def __init__(self, me: str, drives: bool = True) -> None:
        self.me, self.drives = me, drives
        self.heard_at: dict[str, tuple[float, bool]] = {}  # speaker -> (when last heard, whether it drives turns)

    def hear(self, message: Any, now: float) -> bool:
        """Take note of a presence message (True), or say it is none (False)."""
        if not isinstance(message, dict) or message.get("presence") not in ("listening", "leaving"):
            return False
        # Those not heard within PRESENCE_TTL go: a replaced process never comes back under its origin.
        for gone in [speaker for speaker, (at, _drives) in self.heard_at.items() if now - at > PRESENCE_TTL]:
            del self.heard_at[gone]
        speaker = message.get("origin")
        if isinstance(speaker, str) and 0 < len(speaker) <= MAX_ORIGIN_LENGTH:
            if message["presence"] == "listening":
                self.heard_at[speaker] = (now, message.get("drives") is not False)
            else:
                self.forget(speaker)
        return True

    def forget(self, speaker: Any) -> None:
        """``speaker`` claims nothing any more (it left, or it announced hand-offs: it drains)."""
        if isinstance(speaker, str):
            self.heard_at.pop(speaker, None)

    def claimant(self, turn: str, announcer: Any, now: float) -> str:
        """The listener that claims ``turn`` first: of those heard within :data:`PRESENCE_TTL`, this one
        included and the announcer (a draining process) left out, and of them the ones that drive turns if
        any, the highest hash of (listener, turn)."""
        live = {speaker: drives for speaker, (at, drives) in self.heard_at.items()
                if now - at <= PRESENCE_TTL and speaker != announcer}
        live[self.me] = self.drives
        drivers = [speaker for speaker, drives in live.items() if drives] or list(live)
        return max(sorted(drivers), key=lambda speaker: hashlib.blake2b(f"{speaker}|{turn}".encode(), digest_size=8).digest())


def presence(me: str, listening: bool = True, drives: bool = True) -> dict[str, Any]:
    """The message a listener sends to the group when it joins (``listening``) and when it stops (``leaving``);
    ``drives``: whether a turn it claims runs in its process (else it goes through the queue)."""
    return {"type": "update", "origin": me, "presence": "listening" if listening else "leaving", "drives": drives}


async def claim_handed_off_turns() -> None:
    """The reaper's companion: join :data:`.groups.HANDOFFS_GROUP` and resume every turn announced there."""
    if not layer_spans_processes():
        return
    layer = listener_layer()
    channel = await layer.new_channel()
    me = origin()
    listeners = Listeners(me, drives_turns())
    keeper = asyncio.get_running_loop().create_task(_keep_joined(layer, channel, listeners),
                                                    name="agent_persistence.handoffs.join")
    claims: set[asyncio.Task[Any]] = set()
    trouble = LayerTrouble("The hand-off listener")
    try:
        while True:
            try:
                message = await layer.receive(channel)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the layer is down: the reaper's sweeps find the turns meanwhile
                trouble.failed(exc)
                await asyncio.sleep(RETRY_INTERVAL)
                continue
            trouble.cleared()
            if listeners.hear(message, time.monotonic()):
                continue
            # A draining process announces the hand-offs of one flush in one message (``handoffs``). It claims
            # nothing from now on: it is no claimant, even if its "leaving" is lost or comes later.
            listeners.forget(message.get("origin") if isinstance(message, dict) else None)
            # This process's share of the announcement is claimed at once in one call, the rest (backups) later.
            shares: dict[float, list[tuple[uuid.UUID, uuid.UUID]]] = {}
            for announced in announcements(message):
                turn = _claim(announced, me, listeners)
                if turn is not None:
                    shares.setdefault(turn[2], []).append(turn[:2])
            for delay, share in shares.items():
                claim = asyncio.get_running_loop().create_task(_take(share, delay))
                claims.add(claim)
                claim.add_done_callback(claims.discard)
    finally:
        keeper.cancel()
        try:  # so the others stop counting on this one at once, not after PRESENCE_TTL
            await asyncio.wait_for(layer.group_send(HANDOFFS_GROUP, presence(me, listening=False)), RETRY_INTERVAL)
        except (asyncio.CancelledError, Exception):  # noqa: BLE001 - best effort: the others' backups claim its turns
            pass


def listener_layer() -> Any:
    """A channel layer instance of the listener's own, not the process's shared one.

    channels-redis receives on one event loop per layer instance, and the relay
    (:class:`.delivery.Relay`) receives on the server's loop while this listener runs on the
    reaper's (the producer loop): on the shared instance each refused the other in turn ("Two
    event loops are trying to receive() on one channel layer at once!"), so the relay kept going
    down (followers fell back to reading the recording) and announcements went unheard (claims
    waited for a sweep). A layer set without a configuration (tests) is used as it is.
    """
    from channels.layers import DEFAULT_CHANNEL_LAYER, channel_layers

    try:
        return channel_layers.make_backend(DEFAULT_CHANNEL_LAYER)
    except KeyError:
        return get_channel_layer()


def announcements(message: Any) -> list[dict[str, Any]]:
    """The announcements a group message carries: those of its ``handoffs`` (one flush's), or itself.

    What is not a mapping (a message of another sender on the group, a garbled one) is no
    announcement: the listener drops it rather than stop on it.
    """
    if not isinstance(message, dict):
        return []
    together = message.get("handoffs")
    if together is None:
        return [message]
    return [announced for announced in together if isinstance(announced, dict)] if isinstance(together, list) else []


def _claim(message: dict[str, Any], me: str, listeners: Listeners | None = None) -> tuple[uuid.UUID, uuid.UUID, float] | None:
    """One announcement: this process's followers first, then the turn to claim, ``(conversation id, message id,
    delay)`` (:data:`BACKUP_DELAY` unless this process is the turn's claimant among ``listeners``); None for what
    is not one."""
    payload = message.get("payload")
    if not isinstance(payload, dict) or message.get("origin") == me or payload.get("kind") != "handing_off":
        return None
    try:
        conversation_id, message_id = uuid.UUID(message["conversation_id"]), uuid.UUID(payload["message_id"])
    except (KeyError, TypeError, ValueError):
        logger.warning("The hand-off listener dropped a message it could not read.")
        return None
    hub.publish(conversation_id, {**payload, "relayed": True})
    delay = 0.0 if listeners is None else claim_delay(message_id, message.get("origin"), listeners, time.monotonic())
    return conversation_id, message_id, delay


def claim_delay(message_id: uuid.UUID, announcer: Any, listeners: Listeners, now: float) -> float:
    """Seconds this listener waits before it claims the turn: none as its claimant, else :data:`BACKUP_DELAY`."""
    return 0.0 if listeners.claimant(str(message_id), announcer, now) == listeners.me else BACKUP_DELAY


async def _take(share: list[tuple[uuid.UUID, uuid.UUID]], delay: float = 0.0) -> None:
    if delay:
        await asyncio.sleep(delay)
    try:
        handles = await take_handed_off_many(share)
    except Exception:  # noqa: BLE001 - a reaper's sweep takes them instead
        logger.warning("Could not take over %d handed-off turn(s).", len(share), exc_info=True)
        return
    for handle in handles:
        logger.info("Took over the handed-off turn %s of conversation %s (epoch %s).", handle.message_id,
                    handle.conversation_id, handle.epoch)


async def _keep_joined(layer: Any, channel: str, listeners: Listeners) -> None:
    trouble = LayerTrouble("The hand-off listener")
    while True:
        try:
            await layer.group_add(HANDOFFS_GROUP, channel)
            listeners.drives = drives_turns()  # a worker says so at its first task, after its listener started
            await layer.group_send(HANDOFFS_GROUP, presence(listeners.me, drives=listeners.drives))
            trouble.cleared()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - retried; the reaper's sweeps find the turns meanwhile
            trouble.failed(exc)
            await asyncio.sleep(RETRY_INTERVAL)
            continue
        await asyncio.sleep(REJOIN_INTERVAL)
