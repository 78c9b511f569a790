"""The :class:`TurnHost` protocol: what a :class:`~.turn.Turn` needs from the run that drives it.

The turn is what an agent sees; the host (a :class:`~.producer.Producer` in this process) owns
the lease epoch, the stop, the stream's publication and every write, each retried while the
database refuses it. The turn reaches its host only through this protocol, so ``turn.py``
imports nothing of the producer and the producer is free to import the turn.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Protocol

if TYPE_CHECKING:
    from ..models import Interrupt
    from .outcomes import Outcome


class TurnHost(Protocol):
    """The driver of one run of a turn."""

    #: The lease epoch of the run: every write it makes is fenced by it.
    epoch: int
    #: True once a stop (a cancel) was requested.
    cancel_requested: bool
    #: Why the run is being stopped (it decides what the seal writes); None while it runs on.
    stop_reason: Outcome | None

    def message_changed(self) -> None:
        """The turn's cumulative message changed (text streamed, a tool call recorded): record and publish it."""
        ...

    async def save_checkpoint(self) -> None:
        """Save the turn's checkpoint now."""
        ...

    async def raise_interrupt(self, interrupt_id: uuid.UUID, *, run_id: uuid.UUID, kind: str,
                              payload: dict[str, Any], expires_in: float | None) -> Interrupt:
        """Store the question (insert-if-absent) for ``run_id``; the stored row, as it is now."""
        ...

    async def save_activity(self, activity: dict[str, Any]) -> None:
        """Save one activity row and send it to followers; a failure is logged, never raised."""
        ...

    async def persist(self, what: str, write: Callable[[], Awaitable[Any]]) -> Any:
        """Await ``write()``, retried while the database refuses it (``SEAL_RETRY_FOR``); its result."""
        ...

    def step_done(self) -> None:
        """A tool call and its checkpoint are done: a stop that waits for a step boundary (a hand-off) may act."""
        ...
