"""Stream hooks: how a producer tells the rest of the process that its message changed.

The runtime knows nothing of websockets or channel layers. Something that
delivers a turn to clients (``agent_persistence.realtime``) appends a callable
to :data:`stream_listeners`; the producer calls each one on its event loop
with a :class:`StreamUpdate`, at most once per loop iteration however many
chunks the agent streamed in it. A listener must be quick and must not raise.
"""

from __future__ import annotations

import logging
import uuid
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Callable, Iterator

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



#: The sealed turn being announced: the turn store's view of it (a ``TurnView``) while
#: ``conversation_updated`` (ids only) is sent, for receivers in this process.
_sealed_view: ContextVar[Any] = ContextVar("agent_persistence_sealed_view", default=None)


@contextmanager
def sealing(view: Any) -> Iterator[None]:
    """Within the block (the signal's send), :func:`sealed_view` gives ``view``."""
    token = _sealed_view.set(view)
    try:
        yield
    finally:
        _sealed_view.reset(token)


def sealed_view(message_id: uuid.UUID) -> Any:
    """The store's view of the sealed turn ``message_id`` while it is being announced; None otherwise
    (a signal sent by other code, or for another turn)."""
    view = _sealed_view.get()
    return view if view is not None and view.message_id == message_id else None
