"""What every store promises: one ``typing.Protocol`` per store, and the values they trade in.

A backend is a family of classes, one per protocol below, chosen by import
path in ``AGENT_PERSISTENCE`` (``TURN_STORE``, ``CONVERSATION_STORE``, ...).
The accessors in :mod:`agent_persistence.stores` are typed by these
protocols, and the contract suites in :mod:`agent_persistence.testing` assert
through them only, so any backend that passes the suites is a real one.

Every method has an async twin named with an ``a`` prefix (``abegin`` for
``begin``) that runs the sync method in Django's sync thread. The protocols
declare the sync methods only: :func:`agent_persistence.stores.twins.twins_of`
builds the twins once per protocol, and both families' stores inherit them.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import IO, TYPE_CHECKING, Any, Collection, Iterable, Protocol, runtime_checkable

from ..scope import Scope
from ..statuses import LastTurnStatus, RunStatus, SupervisionStatus

if TYPE_CHECKING:
    from ..models import (
        AgentCheckpoint,
        Conversation,
        Event,
        Interrupt,
        Lease,
        Message,
        Run,
        StoredFile,
        StreamRecording,
        Task,
        TurnSupervision,
    )
    from .base import Page
    from .conversations import SavedThread
    from .events import EventPage, EventSummary
    from .files import Content
    from .leases import LeaseResult
    from .supervision import Claim, TurnStatus

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

    ``state`` is "idle", "queued" (enqueued for a worker), "alive", "dead", "handing_off" (released at a
    shutdown, claimable at once), "done", "errored" or "interrupted"
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
        """Take over a dead producer's (or a handed-off) turn at epoch + 1 with a new run.

        Busy while its producer is alive, Gone when it is not running.
        """
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

    def hand_off(self, scope: Scope, conversation_id: Any, *, message_id: Any, run_id: Any, epoch: int,
                 in_flight: str | None = None) -> int | None:
        """Release the turn ``epoch`` produces at a shutdown (one fenced transaction); the epoch it is released at.

        The supervision row becomes ``handed_off`` at the conversation's next epoch (``epoch`` is fenced),
        the turn's open runs are aborted with ``handed_off`` and a ``handed_off`` event is appended (its
        ``in_flight``, "model" or "tool", says what the next producer makes again); the turn does not end: :meth:`resume` claims it at once and :meth:`dead_turns` lists it. None
        (nothing written) when fenced or the conversation is gone.
        """
        ...

    def hand_off_many(self, handoffs: list[dict[str, Any]]) -> dict[uuid.UUID, int]:
        """:meth:`hand_off` for each of a draining process's turns at once (one transaction); ``{conversation_id: released_at}``.

        Each item has :meth:`hand_off`'s keyword arguments (``scope`` included). Each turn is fenced
        and released on its own terms: a fenced or vanished one is left out of the answer and nothing
        of it is written, the others are released all the same. An invalid item, or one conversation
        twice, is Validation and nothing is written.
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

    def force_release(self, conversation_id: Any, *, error: dict[str, Any] | None = None) -> bool:
        """Operator action: end the running turn as errored and fence its producer; False when none runs.

        The turn's open runs are aborted with ``error`` (``{"code", "message"}``; default
        ``force_released``), the reason shown on them in the admin and the API.
        """
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

    def resume_many(self, claims: list[dict[str, Any]], *, replica: str = "") -> dict[uuid.UUID, "TurnPlan | Exception"]:
        """:meth:`resume` of each of ``claims`` (``conversation_id`` and ``message_id``, the handed-off turns a
        listener heard of) as its conversation's owner, in one call; ``{conversation_id: its plan, or the refusal}``.

        Each turn is claimed or refused (Busy, Gone, NotFound) on its own terms, as :meth:`resume` would; a
        batch of turns all still handed off as announced is claimed together. An invalid item, or one
        conversation twice, is Validation and nothing is written.
        """
        ...

    def scope_of(self, conversation_id: Any) -> Scope:
        """The owner's scope of a conversation, for operators and the reaper; NotFound when absent."""
        ...

    def dead_turns(self, *, now: datetime | None = None, limit: int = 100) -> list[tuple[Scope, uuid.UUID, uuid.UUID]]:
        """``(owner scope, conversation id, message id)`` of turns whose producer is dead or that were handed off, oldest first."""
        ...

    def plan_of(self, scope: Scope, conversation_id: Any, *, message_id: Any, run_id: Any, epoch: int, agent_name: str,
                resumed: bool) -> TurnPlan:
        """The plan of a run a transition claimed earlier, read again (a worker of ``TURN_RUNNER = "tasks"``)."""
        ...


# -- one protocol per store -------------------------------------------------------------------
#
# The values these methods return are the models' instances (``Conversation``,
# ``Message``, ``Run``...) used as records: a backend that keeps no tables
# returns unsaved instances, so the models are imported for typing only.
@runtime_checkable
class ConversationStoreProtocol(Protocol):
    """Conversations and messages, scoped by tenant and owner; see ``docs/reference/stores/conversations.md``."""

    def create(
        self,
        scope: Scope,
        *,
        id: Any = None,
        agent: Any = "",
        title: Any = None,
        metadata: Any = None,
        state: Any = None,
        shared: Any = False,
        action_due_at: Any = None,
    ) -> Conversation:
        """A new conversation owned by ``scope``, at version 0."""
        ...

    def get(self, scope: Scope, conversation_id: Any) -> Conversation:
        """The conversation if ``scope`` may read it, else NotFound."""
        ...

    def readable_ids(self, pairs: Iterable[tuple[Scope, Any]]) -> set[tuple[Scope, uuid.UUID]]:
        """The ``(scope, conversation id)`` pairs whose scope may read that conversation now.

        Each conversation is read once, whatever the number of scopes naming it
        (the ORM store: one query per 500 ids); an id that is no UUID, or that no
        conversation has, is in no pair returned. The websocket access sweep's read.
        """
        ...

    def list(
        self,
        scope: Scope,
        *,
        limit: Any = None,
        offset: Any = 0,
        order: Any = "desc",
        agent: Any = None,
        pinned_first: Any = False,
        action_due_before: Any = None,
        with_total: bool | None = None,
    ) -> Page[Conversation]:
        """The scope's own conversations, newest first (``order="asc"``: oldest first)."""
        ...

    def update(
        self,
        scope: Scope,
        conversation_id: Any,
        *,
        title: Any = ...,
        metadata: Any = ...,
        state: Any = ...,
        agent: Any = ...,
        shared: Any = ...,
        action_due_at: Any = ...,
        last_turn_status: Any = ...,
    ) -> Conversation:
        """Replace the given fields; version + 1. Owner only."""
        ...

    def update_if(self, scope: Scope, conversation_id: Any, version: Any, **changes: Any) -> Conversation | None:
        """Like :meth:`update`, only if the stored version is ``version``; None when it is not."""
        ...

    def delete(self, scope: Scope, conversation_id: Any) -> None:
        """Delete the conversation and all it holds (messages, runs, events, files, tasks). Owner only."""
        ...

    def share(self, scope: Scope, conversation_id: Any, shared: Any = True) -> Conversation:
        """Make the conversation readable (or not) by everyone of its tenant; an update."""
        ...

    def append_message(
        self,
        scope: Scope,
        conversation_id: Any,
        *,
        role: Any,
        content: Any,
        id: Any = None,
        name: Any = None,
        tool_call_id: Any = None,
        tool_calls: Any = None,
        files: Any = None,
        metadata: Any = None,
        usage: Any = None,
        run_id: Any = None,
        create: Any = False,
        agent: Any = "",
        title: Any = None,
    ) -> Message:
        """Append a message at the next position; with ``create`` the conversation is made if absent."""
        ...

    def get_message(self, scope: Scope, conversation_id: Any, message_id: Any) -> Message: ...

    def list_messages(
        self,
        scope: Scope,
        conversation_id: Any,
        *,
        limit: Any = None,
        offset: Any = 0,
        order: Any = "asc",
        before: Any = None,
        after: Any = None,
        with_total: bool | None = None,
    ) -> Page[Message]:
        """The transcript, oldest first; ``before`` / ``after`` are strict message-id cursors.

        ``with_total`` (None: only without a cursor) counts the messages into ``Page.total``;
        uncounted, ``total`` is None and ``has_more`` is still exact.
        """
        ...

    def update_message(
        self, scope: Scope, conversation_id: Any, message_id: Any, *, content: Any = ..., metadata: Any = ...
    ) -> Message:
        """Replace the message's content and/or metadata; moves only its ``updated_at``. Owner only.

        The conversation's ``thread_revision`` moves so that its thread tag (``thread_tag``, If-Match of a save) changes.
        """
        ...

    def delete_message(self, scope: Scope, conversation_id: Any, message_id: Any) -> None:
        """Delete one message; its files stay, detached from it. Moves the conversation's ``thread_revision``. Owner only."""
        ...

    def merge_messages(
        self, scope: Scope, conversation_id: Any, messages: Any, *, create: Any = False, agent: Any = "",
        if_match: Any = None,
    ) -> SavedThread:
        """Save a posted transcript with the merge-by-id rule (cutoff, replace, append); the resulting transcript.

        The result is a ``SavedThread``: the transcript (a list of messages) whose ``tag`` is the thread tag
        of the conversation as the save left it, read under the save's lock. With ``if_match`` the
        conversation must exist (NotFound, even with ``create``).
        """
        ...

    def replace_messages(
        self, scope: Scope, conversation_id: Any, messages: Any, *, create: Any = False, agent: Any = "",
        if_match: Any = None,
    ) -> SavedThread:
        """Replace the transcript with exactly ``messages`` (a full overwrite); the resulting transcript and its ``tag``."""
        ...


@runtime_checkable
class EventStoreProtocol(Protocol):
    """Append, read, summarise and prune the per-conversation event log."""

    def append(self, scope: Scope, conversation_id: Any, events: list[dict[str, Any]], *, run_id: Any = None) -> list[Event]:
        """Append ``events`` in order, numbered after the conversation's last seq."""
        ...

    def list(
        self,
        scope: Scope,
        conversation_id: Any,
        *,
        after: int = 0,
        before: int | None = None,
        types: list[str] | None = None,
        limit: int | None = None,
        order: str = "asc",
    ) -> EventPage:
        """Events with ``after < seq < before``, optionally of the given ``types``."""
        ...

    def summary(self, scope: Scope, conversation_ids: list[Any]) -> dict[uuid.UUID, EventSummary]:
        """Last seq and stop reason of each readable conversation; others are left out."""
        ...

    def prune(self, *, before: datetime, limit: int | None = None) -> int:
        """Delete up to ``limit`` events created before ``before``, oldest first; returns how many."""
        ...


@runtime_checkable
class LeaseStoreProtocol(Protocol):
    """Acquire, renew, release, flag and list keyed leases within a tenant."""

    def acquire(
        self,
        tenant: str,
        key: str,
        holder: str,
        *,
        ttl: float,
        metadata: dict[str, Any] | None = None,
        now: datetime | None = None,
    ) -> LeaseResult:
        """Take the lease for ``ttl`` seconds if it is free, expired or already ``holder``'s."""
        ...

    def renew(self, tenant: str, key: str, holder: str, *, ttl: float, now: datetime | None = None) -> Lease | None:
        """Move a live lease's expiry to ``now + ttl``; only its holder, only before it expires."""
        ...

    def release(self, tenant: str, key: str, holder: str) -> bool:
        """Delete the lease if ``holder`` holds it (live or expired but not yet taken over)."""
        ...

    def mark_cancel(self, tenant: str, key: str, *, now: datetime | None = None) -> bool:
        """Ask the holder of a live lease to stop; it sees the flag on its next renew."""
        ...

    def get(self, tenant: str, keys: list[str], *, now: datetime | None = None) -> list[Lease]:
        """The live leases among ``keys``, ordered by key; expired and absent keys are left out."""
        ...

    def list_live(
        self, tenant: str, prefix: str = "", *, now: datetime | None = None, limit: int | None = None, offset: int = 0
    ) -> Page[Lease]:
        """Live leases whose key starts with ``prefix`` (case-sensitive), ordered by key."""
        ...

    def list_expired(
        self, tenant: str, prefix: str = "", *, now: datetime | None = None, limit: int | None = None, offset: int = 0
    ) -> Page[Lease]:
        """Expired leases whose key starts with ``prefix``, the longest expired first."""
        ...


@runtime_checkable
class FileStoreProtocol(Protocol):
    """Files of conversations: a record per file and its content; see ``docs/reference/stores/files.md``."""

    def save(
        self,
        scope: Scope,
        *,
        conversation_id: Any = None,
        message_id: Any = None,
        content: Content,
        name: str,
        content_type: str = "application/octet-stream",
        agent: str | None = None,
        expires_at: datetime | str | None = None,
    ) -> StoredFile:
        """Store ``content`` as a file of the conversation (and message); the new record."""
        ...

    def get(self, scope: Scope, file_id: Any) -> StoredFile:
        """The file's record, if ``scope`` may read its conversation; otherwise NotFound."""
        ...

    def open(self, scope: Scope, file_id: Any) -> IO[bytes]:
        """The file's content, opened for binary reading; the caller closes it."""
        ...

    def read(self, scope: Scope, file_id: Any) -> bytes:
        """The file's whole content."""
        ...

    def list(
        self,
        scope: Scope,
        conversation_id: Any,
        *,
        limit: int | None = None,
        offset: int = 0,
        order: str = "asc",
        before: Any = None,
        after: Any = None,
        with_total: bool | None = None,
    ) -> Page[StoredFile]:
        """The conversation's files, oldest first (``order="desc"``: newest first).

        ``before`` / ``after`` are strict file-id cursors on ``(created_at, id)``, whatever the order
        shown; a cursor that is not a file of this conversation is NotFound. A cursor read is
        uncounted (``total`` None, ``has_more`` exact) unless ``with_total=True``.
        """
        ...

    def delete(self, scope: Scope, file_id: Any) -> None:
        """Delete the file: its record now, its content once the deletion commits."""
        ...

    def purge_expired(self, *, before: datetime | str | None = None, limit: int | None = None) -> int:
        """Delete up to ``limit`` files whose ``expires_at`` is at or before ``before``."""
        ...


@runtime_checkable
class TaskStoreProtocol(Protocol):
    """Background tasks, each visible to its owner only."""

    def create(
        self,
        scope: Scope,
        *,
        title: str,
        description: str | None = None,
        conversation_id: Any = None,
        agent: str | None = None,
        status: str = "pending",
        callback_url: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> Task:
        """A new task of ``scope``, in the conversation if one is given."""
        ...

    def get(self, scope: Scope, task_id: Any) -> Task:
        """The task, if it is ``scope``'s; otherwise NotFound."""
        ...

    def list(
        self,
        scope: Scope,
        *,
        conversation_id: Any = None,
        status: str | None = None,
        limit: int | None = None,
        offset: int = 0,
        order: str = "desc",
        before: Any = None,
        after: Any = None,
        with_total: bool | None = None,
    ) -> Page[Task]:
        """``scope``'s tasks, newest first (``order="asc"``: oldest first), optionally filtered.

        ``before`` / ``after`` are strict task-id cursors on ``(created_at, id)``, whatever the order
        shown; a cursor that is not a task of ``scope`` (of the conversation, with ``conversation_id``;
        any status) is NotFound. A cursor read is uncounted unless ``with_total=True``.
        """
        ...

    def update(
        self,
        scope: Scope,
        task_id: Any,
        *,
        title: Any = ...,
        description: Any = ...,
        status: Any = ...,
        conversation_id: Any = ...,
        callback_url: Any = ...,
        metadata: Any = ...,
        error: Any = ...,
    ) -> Task:
        """Change the fields passed (``None`` clears an optional one); always moves ``updated_at``."""
        ...

    def add_comment(self, scope: Scope, task_id: Any, text: str, *, author: str | None = None) -> Task:
        """Append a comment ``{id, text, author, created_at}``; concurrent comments are all kept."""
        ...

    def set_result(self, scope: Scope, task_id: Any, result: Any) -> Task:
        """Replace the task's one result and stamp ``result_at``; ``None`` clears both."""
        ...

    def get_result(self, scope: Scope, task_id: Any) -> Any:
        """The task's result, or ``None`` when it has none."""
        ...

    def delete(self, scope: Scope, task_id: Any) -> None:
        """Delete the task."""
        ...


@runtime_checkable
class RunStoreProtocol(Protocol):
    """Runs of the agent loop: create-or-resume, status moves, usage, cancellation."""

    def create_or_resume(
        self,
        scope: Scope,
        conversation_id: Any,
        *,
        id: Any,
        message_id: Any,
        name: str = "",
        parent_id: Any = None,
        started_at: datetime | None = None,
        epoch: int | None = None,
    ) -> Run:
        """The run ``id`` of the conversation, inserted as running if it does not exist yet."""
        ...

    def get(self, scope: Scope, run_id: Any) -> Run: ...

    def find_active_run(self, scope: Scope, conversation_id: Any) -> Run | None:
        """The newest running run of the conversation (interrupted ones are parked, not active)."""
        ...

    def list(
        self,
        scope: Scope,
        conversation_id: Any,
        *,
        message_id: Any = None,
        limit: int | None = None,
        offset: int = 0,
        order: str = "desc",
        before: Any = None,
        after: Any = None,
        with_total: bool | None = None,
    ) -> Page[Run]:
        """The conversation's runs (subagents included), newest first; ``message_id`` keeps one turn's.

        ``order="asc"``: oldest first. ``before`` / ``after`` are strict run-id cursors on
        ``(started_at, id)``, whatever the order shown; a cursor that is not a run of this listing
        is NotFound. A cursor read is uncounted unless ``with_total=True``.
        """
        ...

    def children(self, scope: Scope, run_id: Any) -> list[Run]:
        """The run's child runs (subagents), oldest first."""
        ...

    def list_by_parent_run(self, scope: Scope, run_id: Any) -> list[Run]:
        """The seed's (TanStack AI's) name for :meth:`children`: the same call."""
        ...

    def list_reclaimable(self, older_than: Any, *, now: datetime | None = None, limit: int | None = None) -> list[Run]:
        """System sweep: running runs detached at ``now - older_than`` or earlier, longest detached first."""
        ...

    def is_cancel_requested(self, run_id: Any) -> bool:
        """Whether a stop was asked for the run: the producer's cheap poll (False for an unknown run)."""
        ...

    def add_usage(self, scope: Scope, run_id: Any, usage: dict[str, int | float], *, epoch: int | None = None) -> Run:
        """Add ``usage`` to the run's counters (a missing counter starts at 0); the sum of every call is kept."""
        ...

    def set_usage(self, scope: Scope, run_id: Any, usage: dict[str, int | float], *, epoch: int | None = None) -> Run:
        """Replace the run's counters with ``usage`` (absolute totals); counters not named are dropped."""
        ...

    def set_status(
        self, scope: Scope, run_id: Any, status: str, *, transcript: list[dict[str, Any]] | None = None,
        epoch: int | None = None,
    ) -> Run:
        """Move an open run between running and interrupted; ``transcript`` (not None) replaces the run's own."""
        ...

    def finish(
        self,
        scope: Scope,
        run_id: Any,
        status: str,
        *,
        error: dict[str, str] | None = None,
        finished_at: datetime | None = None,
        transcript: list[dict[str, Any]] | None = None,
        epoch: int | None = None,
    ) -> Run:
        """End an open run as completed, failed or aborted, once; a finished run is Conflict("run_finished").

        ``transcript`` (not None) replaces the run's own transcript in the same write.
        """
        ...

    def mark_detached(self, scope: Scope, run_id: Any, since: datetime | None = None, *, epoch: int | None = None) -> Run:
        """Record that nobody follows the open run any more; the first ``since`` is kept."""
        ...

    def clear_detached(self, scope: Scope, run_id: Any, *, epoch: int | None = None) -> Run:
        """Record that the open run is followed (or taken over) again."""
        ...

    def request_cancel(self, scope: Scope, run_id: Any) -> Run:
        """Ask the producer to stop the run (it polls :meth:`is_cancel_requested`)."""
        ...

    def abort_stuck(self, run_id: Any, *, error: dict[str, str] | None = None) -> bool:
        """Operator or system action: abort an open run; False when it had already finished or is unknown."""
        ...


@runtime_checkable
class InterruptStoreProtocol(Protocol):
    """Interrupts: insert-if-absent creation, atomic batch answers, cancellation and the lapse sweep."""

    def create(
        self,
        scope: Scope,
        conversation_id: Any,
        *,
        id: Any,
        run_id: Any,
        kind: str,
        payload: dict[str, Any] | None = None,
        expires_at: datetime | None = None,
        requested_at: datetime | None = None,
        epoch: int | None = None,
    ) -> Interrupt:
        """The interrupt ``id``, inserted as pending if it does not exist yet (else returned unchanged)."""
        ...

    def get(self, scope: Scope, interrupt_id: Any) -> Interrupt: ...

    def list(
        self, scope: Scope, conversation_id: Any = None, *, status: str | None = None, run_id: Any = None
    ) -> list[Interrupt]:
        """The interrupts of a conversation, of a run, or of that run in that conversation, oldest first."""
        ...

    def pending(self, scope: Scope, conversation_id: Any = None, *, run_id: Any = None) -> list[Interrupt]:
        """The pending interrupts of a conversation or of a run, oldest first."""
        ...

    def has_pending(self, conversation_id: Any) -> bool:
        """Whether the conversation waits on an answer: the runtime's cheap check before new input."""
        ...

    def commit_batch(
        self,
        scope: Scope,
        conversation_id: Any,
        answers: list[dict[str, Any]],
        *,
        resolved_by: str | None = None,
        now: datetime | None = None,
        resolved_at: datetime | None = None,
    ) -> list[Interrupt]:
        """Settle (resolve or cancel) every pending interrupt of the conversation with ``answers``, all or nothing."""
        ...

    def cancel(
        self,
        scope: Scope,
        interrupt_id: Any,
        *,
        resolved_by: str | None = None,
        resolved_at: datetime | None = None,
        epoch: int | None = None,
    ) -> Interrupt:
        """Cancel one pending interrupt; one already cancelled is returned unchanged."""
        ...

    def cancel_pending(self, scope: Scope, conversation_id: Any, *, run_id: Any = None, epoch: int | None = None) -> int:
        """Cancel the conversation's pending interrupts (only ``run_id``'s when given); returns how many."""
        ...

    def expire_lapsed(self, *, now: datetime | None = None, limit: int | None = None) -> int:
        """System sweep: cancel pending interrupts with ``expires_at <= now``, earliest first."""
        ...


@runtime_checkable
class SupervisionStoreProtocol(Protocol):
    """The supervision row of each conversation: claims, heartbeats, terminal status."""

    def read(self, conversation_id: Any) -> TurnSupervision | None:
        """The stored row, unscoped (for the runtime); None when there is none."""
        ...

    def status(self, scope: Scope, conversation_id: Any, *, now: datetime | None = None) -> TurnStatus:
        """The turn status a reader of the conversation sees; NotFound when it may not read it."""
        ...

    def list_dead(self, *, now: datetime | None = None, limit: int = 100) -> list[TurnSupervision]:
        """Running rows whose heartbeat is older than ``DEAD_AFTER``, oldest first (for the reaper)."""
        ...

    def compare_and_swap(
        self,
        conversation_id: Any,
        expected_epoch: int | None,
        *,
        status: str,
        message_id: Any,
        epoch: int,
        run_id: Any = None,
        replica: str = "",
        heartbeat_at: datetime | None = None,
    ) -> bool:
        """Write the row iff it holds ``expected_epoch`` (None: iff there is no row)."""
        ...

    def claim(
        self,
        scope: Scope,
        conversation_id: Any,
        *,
        message_id: Any,
        run_id: Any = None,
        replica: str = "",
        now: datetime | None = None,
    ) -> Claim:
        """Start a turn: take the conversation at its next epoch, unless a live turn holds it."""
        ...

    def claim_for_resume(
        self,
        scope: Scope,
        conversation_id: Any,
        *,
        message_id: Any,
        replica: str = "",
        now: datetime | None = None,
    ) -> Claim:
        """Take over the dead producer of turn ``message_id``, keeping its message and run."""
        ...

    def heartbeat_many(self, entries: list[tuple[Any, int]], *, now: datetime | None = None) -> set[uuid.UUID]:
        """Stamp every live turn of this process in one statement; return the fenced conversation ids."""
        ...

    def take_queued(self, conversation_id: Any, *, epoch: int, run_id: Any, replica: str) -> bool:
        """A worker takes a turn enqueued for it: write ``replica`` and the heartbeat iff the row still runs ``run_id``
        at ``epoch`` with the replica ``queued``; whether it did (a task run twice takes nothing)."""
        ...

    def finish(self, conversation_id: Any, *, epoch: int, message_id: Any, status: str) -> bool:
        """Write the terminal status (done | errored) iff the row still runs that epoch and message."""
        ...

    def delete(self, conversation_id: Any, *, message_id: Any, epoch: int) -> bool:
        """Remove the row iff it still holds ``message_id`` at ``epoch``; returns whether it did."""
        ...

    def force_release(self, conversation_id: Any) -> bool:
        """Operator action: mark a running turn errored and fence its producer."""
        ...


@runtime_checkable
class RecordingStoreProtocol(Protocol):
    """The stream recording of each conversation."""

    def put(self, conversation_id: Any, *, message_id: Any, index: int, message: dict[str, Any], epoch: int) -> bool:
        """Overwrite the conversation's record, fenced by ``epoch``."""
        ...

    def put_many(self, records: list[dict[str, Any]]) -> set[uuid.UUID]:
        """Flush a process's records in one transaction; return the conversation ids NOT written."""
        ...

    def read(self, scope: Scope, conversation_id: Any) -> StreamRecording | None:
        """The record, if ``scope`` may read the conversation (NotFound otherwise); None when absent."""
        ...

    def read_unscoped(self, conversation_id: Any) -> StreamRecording | None:
        """The record, for the runtime (a follower already checked access)."""
        ...

    def delete(self, conversation_id: Any, *, message_id: Any) -> bool:
        """Remove the record iff it still belongs to ``message_id``; returns whether it did."""
        ...

    def purge(self, *, finished_before: datetime | None = None, limit: int | None = None) -> int:
        """Delete up to ``limit`` records of finished turns last written before ``finished_before``."""
        ...


@runtime_checkable
class CheckpointStoreProtocol(Protocol):
    """The agent checkpoint of each conversation."""

    def load(self, conversation_id: Any) -> dict[str, Any]:
        """The saved state, for the runtime; ``{}`` when none was saved."""
        ...

    def read(self, conversation_id: Any) -> AgentCheckpoint | None:
        """The stored checkpoint (state, size, message_id, epoch, saved_at), unscoped; None when none was saved."""
        ...

    def load_for(self, scope: Scope, conversation_id: Any) -> dict[str, Any]:
        """The saved state if ``scope`` may read the conversation (NotFound otherwise)."""
        ...

    def save(self, conversation_id: Any, state: dict[str, Any], *, epoch: int, message_id: Any = None) -> None:
        """Replace the conversation's state, fenced by ``epoch``."""
        ...

    def save_many(self, checkpoints: list[dict[str, Any]]) -> set[uuid.UUID]:
        """Save a process's due checkpoints in one transaction; return the conversation ids NOT saved."""
        ...

    def delete(self, conversation_id: Any) -> None:
        """Forget the conversation's state; nothing happens when there is none."""
        ...


__all__ = [
    "CheckpointStoreProtocol",
    "Continuation",
    "ConversationStoreProtocol",
    "EventStoreProtocol",
    "FileStoreProtocol",
    "InterruptStoreProtocol",
    "LeaseStoreProtocol",
    "RecordingStoreProtocol",
    "RunStoreProtocol",
    "Seal",
    "SupervisionStoreProtocol",
    "TaskStoreProtocol",
    "TurnPlan",
    "TurnStoreProtocol",
    "TurnView",
]


# -- activities and metadata (seed 003's activity and metadata stores) -------------------------

if TYPE_CHECKING:
    from ..models import Activity


@runtime_checkable
class ActivityStoreProtocol(Protocol):
    """A conversation's AG-UI activity rows, never part of the transcript; see ``docs/reference/stores/activities.md``."""

    def list(self, scope: Scope, conversation_id: Any, *, message_id: Any = None) -> list[Activity]:
        """The conversation's activities in list order; ``message_id`` keeps one turn's. NotFound unless readable."""
        ...

    def save(self, scope: Scope, conversation_id: Any, activities: list[dict[str, Any]]) -> list[Activity]:
        """Replace the whole list with exactly ``activities``, in one transaction. Owner only."""
        ...

    def put(self, scope: Scope, conversation_id: Any, activity: dict[str, Any], *, epoch: int | None = None) -> Activity:
        """Replace the row with the activity's id, or append it; fenced by ``epoch`` when given. Owner only."""
        ...


@runtime_checkable
class MetadataStoreProtocol(Protocol):
    """Namespaced key/value JSON values of a tenant, for middleware; see ``docs/reference/stores/metadata.md``."""

    def get(self, scope: Scope, namespace: str, key: str, default: Any = None) -> Any:
        """The value under ``namespace`` / ``key`` in the scope's tenant; ``default`` when none is stored."""
        ...

    def set(self, scope: Scope, namespace: str, key: str, value: Any) -> Any:
        """Store ``value`` (any JSON value), replacing any; the value as stored. Concurrent sets: the last commit wins."""
        ...

    def delete(self, scope: Scope, namespace: str, key: str) -> bool:
        """Remove the value; whether there was one."""
        ...


__all__ += ["ActivityStoreProtocol", "MetadataStoreProtocol"]


# -- blobs, artifacts and generation runs (issue 11) ----------------------------------------------

if TYPE_CHECKING:
    from ..models import Artifact, Blob, GenerationRun
    from .blobs import BlobPage, BlobRead, ByteRange


@runtime_checkable
class BlobStoreProtocol(Protocol):
    """Bytes under caller keys, per tenant; see ``docs/reference/stores/blobs.md``."""

    def put(
        self,
        tenant: str,
        key: str,
        content: Content,
        *,
        content_type: str | None = None,
        custom_metadata: dict[str, str] | None = None,
    ) -> Blob:
        """Store ``content`` (and its ``custom_metadata`` text pairs) under ``key``, replacing what it held; the row."""
        ...

    def head(self, tenant: str, key: str) -> Blob | None:
        """The blob's row without its bytes; None when the key holds nothing."""
        ...

    def open(self, tenant: str, key: str) -> tuple[Blob, IO[bytes]]:
        """The blob's row and its bytes opened for reading (the caller closes them); NotFound when absent."""
        ...

    def get(self, tenant: str, key: str, *, byte_range: ByteRange | None = None) -> BlobRead:
        """The blob's bytes, or only ``byte_range`` of them; NotFound, RangeNotSatisfiable."""
        ...

    def delete(self, tenant: str, key: str) -> bool:
        """Delete the blob (its bytes once that commits); whether it existed."""
        ...

    def list(self, tenant: str, *, prefix: str = "", cursor: str | None = None, limit: int | None = None) -> BlobPage:
        """Blobs whose key starts with ``prefix`` (literal, case-sensitive), ascending, after ``cursor``."""
        ...


@runtime_checkable
class ArtifactStoreProtocol(Protocol):
    """Records of bytes a run produced, each owning a blob; see ``docs/reference/stores/artifacts.md``."""

    def save(
        self,
        scope: Scope,
        *,
        run_id: Any,
        content: Content,
        media_type: Any = None,
        name: Any = "",
        metadata: Any = None,
    ) -> Artifact:
        """Store ``content`` as an artifact of the run (chat or generation); the new record."""
        ...

    def save_record(
        self,
        scope: Scope,
        *,
        id: Any,
        run_id: Any,
        blob_key: Any = None,
        source_url: Any = None,
        media_type: Any = None,
        name: Any = "",
        size: Any = None,
        metadata: Any = None,
        created_at: Any = None,
    ) -> Artifact:
        """Save a record only, under the caller's ``id``, its bytes a blob under ``blob_key`` or at ``source_url``."""
        ...

    def get(self, scope: Scope, artifact_id: Any) -> Artifact:
        """The record if ``scope`` may read it; NotFound("artifact_not_found") otherwise."""
        ...

    def open(self, scope: Scope, artifact_id: Any) -> tuple[Artifact, IO[bytes]]:
        """The record and its bytes opened for reading (the caller closes them)."""
        ...

    def read(self, scope: Scope, artifact_id: Any, *, byte_range: ByteRange | None = None) -> BlobRead:
        """The artifact's bytes, or only ``byte_range`` of them."""
        ...

    def list_by_run(
        self, scope: Scope, run_id: Any, *, limit: Any = None, offset: Any = 0, with_total: Any = None
    ) -> Page[Artifact]:
        """The run's artifacts, oldest first, then by id; counted unless ``with_total`` is False."""
        ...

    def list_by_conversation(
        self, scope: Scope, conversation_id: Any, *, limit: Any = None, offset: Any = 0, with_total: Any = None
    ) -> Page[Artifact]:
        """The conversation's artifacts, oldest first, then by id; counted unless ``with_total`` is False."""
        ...

    def delete(self, scope: Scope, artifact_id: Any) -> None:
        """Delete the artifact and its blob. Owner only."""
        ...

    def delete_for_run(self, scope: Scope, run_id: Any) -> int:
        """Delete every artifact of the run and their blobs; how many. Owner only."""
        ...


@runtime_checkable
class GenerationRunStoreProtocol(Protocol):
    """Records of non-chat generations, by the caller's run id and a slot; see ``docs/reference/stores/generations.md``."""

    def create_or_resume(
        self,
        scope: Scope,
        *,
        id: Any,
        slot: Any,
        kind: Any,
        provider: Any = "",
        model: Any = "",
        conversation_id: Any = None,
        started_at: Any = None,
        metadata: Any = None,
    ) -> GenerationRun:
        """The run ``id``, inserted as running if absent; otherwise the stored one, unchanged."""
        ...

    def get(self, scope: Scope, run_id: Any) -> GenerationRun:
        """The run if ``scope`` may read it; NotFound("generation_run_not_found") otherwise."""
        ...

    def update(
        self,
        scope: Scope,
        run_id: Any,
        *,
        status: Any = ...,
        finished_at: Any = ...,
        error: Any = ...,
        result: Any = ...,
        usage: Any = ...,
        metadata: Any = ...,
        artifacts: Any = ...,
    ) -> GenerationRun | None:
        """Patch the given fields (``artifacts``: a list of ref objects); None (a no-op) when no run of ``scope`` has it."""
        ...

    def latest(self, scope: Scope, slot: Any) -> GenerationRun | None:
        """The scope's latest run of ``slot``; None when it has none."""
        ...

    def delete(self, scope: Scope, run_id: Any) -> None:
        """Delete the run, its artifacts and their blobs. Owner only."""
        ...


__all__ += ["ArtifactStoreProtocol", "BlobStoreProtocol", "GenerationRunStoreProtocol"]


# -- websocket tickets ------------------------------------------------------------------------

if TYPE_CHECKING:
    from ..models import WebsocketTicket


@runtime_checkable
class TicketStoreProtocol(Protocol):
    """Short-lived, single-use websocket tickets; see ``docs/reference/stores/tickets.md``.

    The store keeps the tickets; signing their ids and checking their Django
    user is :mod:`agent_persistence.realtime.tickets`'s.
    """

    def issue(
        self, scope: Scope, *, conversation_id: Any = None, account: str = "", ttl: float, per_minute: int | None = None,
        now: datetime | None = None,
    ) -> WebsocketTicket:
        """A new ticket for ``scope``, expiring ``ttl`` seconds from ``now``, opening only ``conversation_id`` when given.

        TooManyRequests (``too_many_tickets``, with ``retry_after``) when ``scope``
        was issued ``per_minute`` tickets in the minute before ``now`` (None: no cap).
        """
        ...

    def redeem(self, ticket_id: Any, conversation_id: Any = None, *, now: datetime | None = None) -> WebsocketTicket | None:
        """Spend the ticket for a socket to ``conversation_id``; the spent ticket, or None when it may not be spent.

        None when the ticket is unknown, spent, expired at ``now``, or bound to another
        conversation (then it stays unspent). Of any number of concurrent redeems of
        one ticket, on any processes, exactly one gets it.
        """
        ...

    def purge_expired(self, *, before: datetime, limit: int) -> int:
        """Delete up to ``limit`` tickets that expired before ``before`` (spent or not), earliest first; the number deleted."""
        ...


__all__ += ["TicketStoreProtocol"]
