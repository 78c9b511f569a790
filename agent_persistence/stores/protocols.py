"""What every store promises: one ``typing.Protocol`` per store, and the values they trade in.

A backend is a family of classes, one per protocol below, chosen by import
path in ``AGENT_PERSISTENCE`` (``TURN_STORE``, ``CONVERSATION_STORE``, ...).
The accessors in :mod:`agent_persistence.stores` are typed by these
protocols, and the contract suites in :mod:`agent_persistence.testing` assert
through them only, so any backend that passes the suites is a real one.

Every method has an async twin named with an ``a`` prefix (``abegin`` for
``begin``) that runs the sync method in Django's sync thread.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Collection, Protocol, runtime_checkable

from ..scope import Scope
from ..statuses import LastTurnStatus, RunStatus, SupervisionStatus

# -- the turn aggregate -------------------------------------------------------------------------


@dataclass(frozen=True)
class TurnPlan:
    """Everything the store said about a run about to be driven: the runtime needs nothing else.

    ``start_index`` is the recording's index for this turn (indexes keep
    rising across the runs of one turn, so followers never see one twice);
    ``checkpoint`` and ``answers`` are empty for a fresh turn.
    """

    scope: Scope
    conversation_id: uuid.UUID
    message_id: uuid.UUID
    run_id: uuid.UUID
    epoch: int
    agent_name: str
    resumed: bool
    start_index: int
    transcript: list[Any]
    checkpoint: dict[str, Any]
    answers: dict[str, Any]


@dataclass(frozen=True)
class Continuation:
    """What answering a batch of interrupts did.

    ``interrupts`` are the batch's interrupts in its order. ``plan`` is set
    when the answers released the turn and it must be driven on here: a
    continuation of an interrupted run, or (``plan.resumed`` with
    ``took_over``) the resume of a turn whose producer died. None when
    interrupts are still pending or a live producer picks the answers up itself.
    """

    interrupts: list[Any]
    plan: TurnPlan | None = None
    took_over: bool = False


@dataclass(frozen=True)
class Seal:
    """What a sealed outcome writes: the run's, the supervision row's and the conversation's status."""

    run_status: RunStatus
    supervision_status: SupervisionStatus
    last_turn_status: LastTurnStatus


@dataclass
class TurnView:
    """One read of a conversation's turn, for followers and the stream endpoint.

    ``state`` is "idle", "alive", "dead", "done", "errored" or "interrupted"
    (done, with pending interrupts). ``run_id`` and ``epoch`` name the run
    that holds the turn now (after a takeover, the resumed run).
    """

    state: str
    message_id: uuid.UUID | None
    run_id: uuid.UUID | None
    epoch: int
    replica: str = ""
    heartbeat_age: float | None = None
    record: dict[str, Any] | None = None  # {epoch, index, message} of the turn's recording
    final: dict[str, Any] | None = None  # {message, stop_reason, error} of a sealed turn
    interrupts: list[dict[str, Any]] = field(default_factory=list)


@runtime_checkable
class TurnStoreProtocol(Protocol):
    """Every turn transition that writes more than one table, each one transaction.

    Each transition takes its locks in the one order its backend documents and
    checks existence and access inside its transaction, so a refusal
    (NotFound, ConversationNotOwned, Busy, PendingInterrupts, Gone,
    Validation) changes nothing.
    """

    def begin(
        self,
        scope: Scope,
        conversation_id: Any,
        *,
        content: Any,
        known_agents: Collection[str],
        agent: str | None = None,
        message_id: Any = None,
        user_message_id: Any = None,
        metadata: dict[str, Any] | None = None,
        replica: str = "",
    ) -> TurnPlan:
        """Store the user message, claim the conversation (creating it when new), create the run.

        ``agent`` defaults to the conversation's (when the scope may read it);
        a name not in ``known_agents`` is Validation("unknown_agent").
        """
        ...

    def continue_after_answers(
        self,
        scope: Scope,
        conversation_id: Any,
        answers: list[dict[str, Any]],
        *,
        resolved_by: str | None = None,
        replica: str = "",
    ) -> Continuation:
        """Commit the answers (all or nothing) and, when they release the turn, claim its next run."""
        ...

    def resume(self, scope: Scope, conversation_id: Any, *, message_id: Any = None, replica: str = "") -> TurnPlan:
        """Take over a dead producer's turn at epoch + 1 with a new run; Busy if alive, Gone if not running."""
        ...

    def suspend(self, scope: Scope, conversation_id: Any, *, message_id: Any, run_id: Any, epoch: int) -> bool:
        """Park the run as interrupted and release the conversation; False when nothing is pending any more.

        Fenced: raises Fenced once a newer epoch holds the conversation.
        """
        ...

    def seal(
        self,
        scope: Scope,
        conversation_id: Any,
        *,
        message_id: Any,
        run_id: Any,
        epoch: int,
        message: dict[str, Any],
        seal: Seal,
        stop_reason: str,
        error: dict[str, str] | None = None,
    ) -> bool:
        """Write the turn's end: assistant message, run, supervision row, last_turn_status, event.

        False (nothing written) when fenced or the conversation is gone.
        """
        ...

    def close_out(
        self,
        scope: Scope,
        conversation_id: Any,
        *,
        seal: Seal,
        stop_reason: str,
        error: dict[str, str] | None = None,
        replica: str = "",
    ) -> bool:
        """End a dead producer's turn without re-driving it, with the partial answer of its recording.

        Busy while the producer is alive; False when no turn is running.
        """
        ...

    def force_release(self, conversation_id: Any) -> bool:
        """Operator action: end the running turn as errored and fence its producer; False when none runs."""
        ...

    def read_turn(self, scope: Scope | None, conversation_id: Any) -> TurnView:
        """The turn as a follower sees it now; NotFound when ``scope`` may not read the conversation.

        ``scope`` None reads unscoped (the caller checked access).
        """
        ...

    def answers(self, conversation_id: Any, message_id: Any) -> dict[str, Any]:
        """The answered interrupts of a turn, ``{interrupt id: response}``."""
        ...

    def stop_requested(self, run_ids: Collection[Any]) -> set[uuid.UUID]:
        """The runs among ``run_ids`` whose stop was requested, from any process."""
        ...

    def scope_of(self, conversation_id: Any) -> Scope:
        """The owner's scope of a conversation, for operators and the reaper; NotFound when absent."""
        ...

    def dead_turns(self, *, now: datetime | None = None, limit: int = 100) -> list[tuple[Scope, uuid.UUID, uuid.UUID]]:
        """``(owner scope, conversation id, message id)`` of turns whose producer is dead, oldest first."""
        ...


__all__ = ["Continuation", "Seal", "TurnPlan", "TurnStoreProtocol", "TurnView"]
