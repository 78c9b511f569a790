"""Claiming the turns other processes hand off at their shutdown, as soon as they announce them.

A process that shuts down releases each turn it still drives as ``handed_off`` and sends the
turn to :data:`.groups.HANDOFFS_GROUP` (:func:`.delivery.on_handoff`, after the batch that
carries the turn's last deltas; the hand-offs of one flush in one message,
:func:`.delivery.handoffs_message`). Every process whose reaper runs (``REAPER_ENABLED``) listens
on that group beside its reaper (a reaper companion, :data:`agent_persistence.runtime.hooks.reaper_companions`,
so on the reaper's loop and for as long as it runs) and, for each turn it hears of:

1. tells its own followers of the conversation (a ``handing_off`` status), before anything of
   the new producer can reach them;
2. resumes the turn here (:func:`agent_persistence.runtime.lifecycle.take_handed_off`). Every
   listener tries; the turn store admits one, the others are refused (Busy) and let it be.

Without a layer that spans processes nothing is announced: the reapers' sweeps list handed-off
turns at once (no ``DEAD_AFTER`` to wait for), so a turn is resumed within ``REAPER_INTERVAL``.
"""

from __future__ import annotations

import asyncio
import logging
import random
import uuid
from typing import Any

from channels.layers import get_channel_layer

from ..runtime.lifecycle import take_handed_off
from .delivery import RETRY_INTERVAL, LayerTrouble, hub, layer_spans_processes, origin
from .groups import HANDOFFS_GROUP

logger = logging.getLogger(__name__)

#: Seconds between two joins of the group (a restarted Redis forgot the membership).
REJOIN_INTERVAL = 5.0


async def claim_handed_off_turns() -> None:
    """The reaper's companion: join :data:`.groups.HANDOFFS_GROUP` and resume every turn announced there."""
    if not layer_spans_processes():
        return
    layer = listener_layer()
    channel = await layer.new_channel()
    keeper = asyncio.get_running_loop().create_task(_keep_joined(layer, channel), name="agent_persistence.handoffs.join")
    claims: set[asyncio.Task[Any]] = set()
    trouble = LayerTrouble("The hand-off listener")
    me = origin()
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
            # A draining process announces the hand-offs of one flush in one message (``handoffs``). Every
            # listener claims them in an order of its own, so two survivors meet halfway instead of both
            # waiting on the same row lock, one turn after another, the loser of each.
            announced_together = announcements(message)
            random.shuffle(announced_together)
            for announced in announced_together:
                claim = _claim(announced, me)
                if claim is not None:
                    claims.add(claim)
                    claim.add_done_callback(claims.discard)
    finally:
        keeper.cancel()


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


def _claim(message: dict[str, Any], me: str) -> asyncio.Task[Any] | None:
    """One announcement: this process's followers first, then a claim (a task); None for what is not one."""
    payload = message.get("payload")
    if not isinstance(payload, dict) or message.get("origin") == me or payload.get("kind") != "handing_off":
        return None
    try:
        conversation_id, message_id = uuid.UUID(message["conversation_id"]), uuid.UUID(payload["message_id"])
    except (KeyError, TypeError, ValueError):
        logger.warning("The hand-off listener dropped a message it could not read.")
        return None
    hub.publish(conversation_id, {**payload, "relayed": True})
    return asyncio.get_running_loop().create_task(_take(conversation_id, message_id))


async def _take(conversation_id: uuid.UUID, message_id: uuid.UUID) -> None:
    try:
        handle = await take_handed_off(conversation_id, message_id)
    except Exception:  # noqa: BLE001 - a reaper's sweep takes it instead
        logger.warning("Could not take over the handed-off turn of conversation %s.", conversation_id, exc_info=True)
        return
    if handle is not None:
        logger.info("Took over the handed-off turn %s of conversation %s (epoch %s).", message_id, conversation_id,
                    handle.epoch)


async def _keep_joined(layer: Any, channel: str) -> None:
    trouble = LayerTrouble("The hand-off listener")
    while True:
        try:
            await layer.group_add(HANDOFFS_GROUP, channel)
            trouble.cleared()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - retried; the reaper's sweeps find the turns meanwhile
            trouble.failed(exc)
            await asyncio.sleep(RETRY_INTERVAL)
            continue
        await asyncio.sleep(REJOIN_INTERVAL)
