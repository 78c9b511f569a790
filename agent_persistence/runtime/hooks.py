"""Stream hooks: how a producer tells the rest of the process that its message changed.

The runtime knows nothing of websockets or channel layers. Something that
delivers a turn to clients (``agent_persistence.realtime``) appends a callable
to :data:`stream_listeners`; the producer calls each one on its event loop
with a :class:`StreamUpdate`, at most once per loop iteration however many
chunks the agent streamed in it. A listener must be quick and must not raise.

The view of a sealed turn that receivers of ``conversation_updated`` read
(:func:`~agent_persistence.signals.sealing`, :func:`~agent_persistence.signals.sealed_view`)
lives beside the signal, since the turn store sets it; it is importable from here too.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import Any, Callable

from ..signals import sealed_view, sealing

__all__ = [
    "ActivityUpdate", "FLUSH_TIMEOUT", "HandOff", "StreamUpdate", "activity_listeners", "announcement_flushers",
    "flush_announcements", "handoff_listeners", "publish", "publish_activity", "publish_handoff", "reaper_companions",
    "sealed_view", "sealing", "stream_listeners",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class StreamUpdate:
    """The cumulative message of a turn at ``index``, as its producer (``epoch``) holds it."""

    conversation_id: uuid.UUID
    message_id: uuid.UUID
    run_id: uuid.UUID
    epoch: int
    index: int
    content: str
    tool_calls: list[dict[str, Any]] | None


StreamListener = Callable[[StreamUpdate], None]

#: Called on the producer's event loop; registered by ``agent_persistence.realtime`` in ``ready()``.
stream_listeners: list[StreamListener] = []


def publish(update: StreamUpdate) -> None:
    for listener in stream_listeners:
        try:
            listener(update)
        except Exception:  # noqa: BLE001 - delivery must never break the turn
            logger.exception("A stream listener failed for conversation %s", update.conversation_id)


@dataclass(frozen=True, slots=True)
class ActivityUpdate:
    """An activity row a producer (``epoch``) saved: ``activity`` is its frame's fields (:func:`~agent_persistence.stores.activities.activity_as_json`)."""

    conversation_id: uuid.UUID
    epoch: int
    activity: dict[str, Any]


ActivityListener = Callable[[ActivityUpdate], None]

#: Called on the producer's event loop after each saved activity; registered by ``agent_persistence.realtime``.
activity_listeners: list[ActivityListener] = []


def publish_activity(update: ActivityUpdate) -> None:
    for listener in activity_listeners:
        try:
            listener(update)
        except Exception:  # noqa: BLE001 - delivery must never break the turn
            logger.exception("An activity listener failed for conversation %s", update.conversation_id)


@dataclass(frozen=True, slots=True)
class HandOff:
    """A producer (``epoch``) of this process released its turn at a shutdown, at ``released_at`` (epoch + 1)."""

    conversation_id: uuid.UUID
    message_id: uuid.UUID
    run_id: uuid.UUID
    epoch: int
    released_at: int


HandOffListener = Callable[[HandOff], None]

#: Called on the producer's event loop once a hand-off has committed; ``agent_persistence.realtime``
#: registers one that tells followers (a ``handing_off`` status) and the other processes' reapers.
handoff_listeners: list[HandOffListener] = []


def publish_handoff(update: HandOff) -> None:
    for listener in handoff_listeners:
        try:
            listener(update)
        except Exception:  # noqa: BLE001 - the turn is released anyway; a sweep of any reaper finds it
            logger.exception("A hand-off listener failed for conversation %s", update.conversation_id)


#: Coroutine functions run beside the in-process reaper, on its loop, for as long as it runs;
#: ``agent_persistence.realtime`` registers one that claims the turns other processes hand off.
reaper_companions: list[Callable[[], Any]] = []


#: ``TURN_RUNNER = "tasks"``: the coroutine function that enqueues a claimed run (a ``TurnPlan``) for a worker.
#: :mod:`.workers` sets it when it is imported (``AppConfig.ready`` imports it when ``TURN_RUNNER`` is "tasks").
run_enqueuer: Callable[[Any], Any] | None = None


#: Awaited by :func:`flush_announcements`; ``agent_persistence.realtime`` registers one that waits until this
#: loop's channel-layer sender has sent what is queued (the seal of a turn included).
announcement_flushers: list[Callable[[], Any]] = []

#: The longest :func:`flush_announcements` waits (a layer that is down must not hold a process's exit).
FLUSH_TIMEOUT = 2.0


async def flush_announcements(timeout: float = FLUSH_TIMEOUT) -> None:
    """Wait until what this loop announced (deltas, activities, seals) has left for other processes.

    A process whose event loop ends soon after a seal (``manage.py reap_turns``, a script under
    ``asyncio.run``) awaits it first, or the seal queued on the loop's sender is lost with the loop
    and followers on other servers never hear of it. Never raises; waits at most ``timeout``.
    """
    import asyncio

    for flusher in list(announcement_flushers):
        try:
            async with asyncio.timeout(timeout):
                await flusher()
        except Exception:  # noqa: BLE001 - followers elsewhere still read the turn at their bounded pace
            logger.warning("Announcements of this process did not all leave within %.1f s.", timeout, exc_info=True)
