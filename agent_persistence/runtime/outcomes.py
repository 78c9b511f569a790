"""How a run ends: the :class:`Outcome` a producer seals, what each sealed outcome writes, and the
two exceptions an agent's ``await turn.interrupt(...)`` can raise.

These sit in a module of their own because every part of the runtime needs them (the turn raises
them, subagents judge their child runs by them, the producer and the entry points seal with them)
and none of those parts should need another to get them.
"""

from __future__ import annotations

import enum
import uuid

from ..statuses import LastTurnStatus, RunStatus, SupervisionStatus
from ..stores.protocols import Seal


class Outcome(str, enum.Enum):
    COMPLETED = "completed"
    CANCELLED = "cancelled"
    ERRORED = "errored"
    INTERRUPTED = "interrupted"
    #: A newer epoch holds the conversation, or the conversation is gone: nothing is written.
    FENCED = "fenced"
    #: The run stopped without a hand-off (its loop ended): nothing is written; the turn reads dead after
    #: ``DEAD_AFTER`` and is resumed elsewhere.
    ABANDONED = "abandoned"
    #: This process is shutting down (``SHUTDOWN_GRACE`` ran out): recording and checkpoint flushed, the turn
    #: released as ``handed_off`` at epoch + 1 and announced, so another process resumes it at once.
    HANDED_OFF = "handed_off"


#: What each sealed outcome writes.
SEALS = {
    Outcome.COMPLETED: Seal(RunStatus.COMPLETED, SupervisionStatus.DONE, LastTurnStatus.COMPLETE),
    Outcome.CANCELLED: Seal(RunStatus.ABORTED, SupervisionStatus.DONE, LastTurnStatus.CANCELLED),
    Outcome.ERRORED: Seal(RunStatus.FAILED, SupervisionStatus.ERRORED, LastTurnStatus.ERRORED),
}


class TurnSuspended(Exception):
    """Raised inside ``run`` when an interrupt awaits an answer: the run ends as interrupted."""

    def __init__(self, interrupt_id: uuid.UUID) -> None:
        self.interrupt_id = interrupt_id
        super().__init__(f"Waiting for the answer to interrupt {interrupt_id}.")


#: What the framework bridges hand their framework for a cancelled question: no approval, no result.
CANCELLED_ANSWER = {"cancelled": True}


class InterruptCancelled(Exception):
    """Raised by ``turn.interrupt`` when the question was cancelled (a resume batch's cancelled entry)."""

    def __init__(self, interrupt_id: uuid.UUID) -> None:
        self.interrupt_id = interrupt_id
        super().__init__(f"Interrupt {interrupt_id} was cancelled.")
