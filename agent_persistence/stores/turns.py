"""The turn store: every turn transition that writes more than one table, on the Django ORM.

Each transition (begin, continue after answers, resume, suspend, seal, close
out, force release) is one transaction that checks existence and access
inside it, after its locks, so a refusal writes nothing and two transitions
never interleave. The runtime calls these and nothing else for a turn's
multi-table writes; it opens no transaction itself.

Lock order
----------
Every transition takes its locks in this order, and only this order:

1. the conversation's supervision row (``SELECT ... FOR UPDATE``; absent is fine);
2. the conversation row (``SELECT ... FOR UPDATE``, or its INSERT for a new one);
3. then only rows that hang off the conversation (runs, interrupts, messages,
   events, the conversation's counters), which no transaction reaches without
   holding 2.

The producer's fenced writes elsewhere (batched heartbeats, recordings,
checkpoints, interrupt creation: see :mod:`.fencing`) lock 1 and then, at
most, 2 and their own rows, so they keep the same order. When no supervision
row exists, 2 is taken alone; if a row appears before 2 is held (another
claim committed in between), 2 is released by rolling back its savepoint and
the sequence starts again, so 1 is never requested while 2 is held.

SQLite ignores row locks: its IMMEDIATE transactions take the database write
lock at BEGIN, which serialises the same transitions.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Collection

from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.utils import timezone

from ..exceptions import Busy, Conflict, Fenced, Gone, NotFound, PendingInterrupts, Validation
from ..ids import uuid7
from ..models import Conversation, Interrupt, Message, Run, StreamRecording, TurnSupervision
from ..scope import Scope
from ..statuses import OPEN_RUN_STATUSES, InterruptStatus, LastTurnStatus, Role, RunStatus, SupervisionStatus, TurnState
from .base import bump_counter, can_read, check_scope, check_writable, lookup_id, parse_id
from .checkpoints import CheckpointStore
from .conversations import ID_TAKEN_MESSAGE, MessageInput, clean_agent, clean_message, insert_message, message_conflict
from .dialects import dialect_for
from .events import EventStore
from .fencing import LOCK_ATTEMPTS, contended, fence, limit_lock_wait, lock_turn
from .interrupts import InterruptStore
from .protocols import Continuation, Seal, TurnPlan, TurnStoreProtocol, TurnView
from .rules.supervision import HANDED_OFF, OPEN_STATUSES, dead_q, is_claimable, is_waiting
from .rules.turns import (
    FORCE_RELEASED,
    HANDED_OFF as HANDED_OFF_ERROR,
    PRODUCER_LOST,
    TURN_ENDED,
    announce,
    clean_claims,
    clean_hand_off,
    clean_known_agents,
    clean_seal,
    handed_off_event,
    idle_event,
    lost_event,
    resume_each,
    running_event,
    unknown_agent,
)
from .rules.turns import (  # re-exported: these rules moved to agent_persistence/stores/rules/turns.py
    event_data as event_data,
)
from .runs import clean_error
from .supervision import clean_lease_epoch, clean_replica, occupant_of, status_of
from .twins import twins_of

# -- locking ----------------------------------------------------------------------------------


def create_locked(scope: Scope, pk: uuid.UUID, *, agent: str, now: datetime) -> Conversation | None:
    """Insert the scope's new conversation (lock 2 for a new one); None when another transaction made it first."""
    try:
        with transaction.atomic():
            return Conversation.objects.create(
                id=pk, tenant=scope.tenant, owner=scope.user, agent=agent, created_at=now, updated_at=now
            )
    except IntegrityError:
        # PostgreSQL made us wait for the other insert's commit: lock again, supervision row first.
        return None


# -- writes under the locks -------------------------------------------------------------------


def claim(conversation: Conversation, row: TurnSupervision | None, *, message_id: uuid.UUID, run_id: uuid.UUID,
          replica: str, now: datetime) -> int:
    """Write the supervision row at the conversation's next epoch; the caller bumps the conversation to it."""
    epoch = conversation.epoch + 1
    values = {
        "status": SupervisionStatus.RUNNING,
        "message_id": message_id,
        "run_id": run_id,
        "epoch": epoch,
        "replica": replica,
        "heartbeat_at": now,
        "claimed_at": now,
    }
    if row is None:
        TurnSupervision.objects.create(conversation_id=conversation.pk, **values)
    elif not TurnSupervision.objects.filter(pk=conversation.pk, epoch=row.epoch).update(**values):
        raise contended()  # only a writer that ignores the lock order gets here
    return epoch


def set_conversation(scope: Scope, conversation: Conversation, *, messages: int = 0, **changes: Any) -> int:
    """One UPDATE of the locked conversation: ``changes``, and ``messages`` positions reserved; the first one."""
    next_position = bump_counter(scope, conversation.pk, "next_position", messages, **changes)
    if next_position is None:  # the row is locked by us: only a writer ignoring the lock order gets here
        raise contended()
    return next_position - messages


def insert_turn_message(pk: uuid.UUID, message: MessageInput, position: int, now: datetime) -> None:
    try:
        with transaction.atomic():
            insert_message(pk, message, position, now)
    except IntegrityError:
        raise message_conflict([message.id]) from None


def open_runs(pk: uuid.UUID, message_id: uuid.UUID) -> Any:
    return Run.objects.filter(conversation_id=pk, message_id=message_id, status__in=OPEN_RUN_STATUSES)


def finish_runs(runs: Any, status: RunStatus, error: dict[str, str] | None, now: datetime) -> int:
    return runs.update(status=status, error=error, finished_at=now)


def latest_run(pk: uuid.UUID, message_id: uuid.UUID) -> Run | None:
    """The turn's newest top-level run (a subagent's child run shares the turn's message_id)."""
    runs = Run.objects.filter(conversation_id=pk, message_id=message_id, parent__isnull=True)
    return runs.order_by("-started_at", "-id").first()


def new_run(pk: uuid.UUID, *, run_id: uuid.UUID, message_id: uuid.UUID, name: str, epoch: int, now: datetime) -> None:
    Run.objects.create(
        id=run_id, conversation_id=pk, message_id=message_id, name=name, status=RunStatus.RUNNING, epoch=epoch,
        started_at=now,
    )


def pending_ids(pk: uuid.UUID) -> list[uuid.UUID]:
    return list(
        Interrupt.objects.filter(conversation_id=pk, status=InterruptStatus.PENDING)
        .order_by("requested_at", "id")
        .values_list("pk", flat=True)
    )


def final_of(content: Any, tool_calls: Any, metadata: dict[str, Any] | None) -> dict[str, Any]:
    """``TurnView.final`` of a sealed turn's stored answer: {message, stop_reason, error}."""
    metadata = metadata or {}
    message = {"role": Role.ASSISTANT.value, "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {"message": message, "stop_reason": metadata.get("stop_reason"), "error": metadata.get("error")}


# -- the store --------------------------------------------------------------------------------


class _NotAllAtOnce(Exception):
    """A batch of hand-offs that cannot be released together (:meth:`TurnStore._release_all_handed_off`)."""


class TurnStore(twins_of(TurnStoreProtocol)):
    """The turn aggregate on the Django ORM: see the module's lock order."""

    def __init__(self) -> None:
        # The family's single-table stores, called inside the transitions' transactions.
        self.events = EventStore()
        self.interrupts = InterruptStore()
        self.checkpoints = CheckpointStore()

    # -- starting -----------------------------------------------------------------------------

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

        The agent defaults to the conversation's when the scope may read it;
        so an id the scope may not see answers like an unknown one.
        """
        check_scope(scope)
        pk = parse_id(conversation_id, "conversation")
        # A message id made here is new: no recording of the conversation can be at it.
        fresh = message_id is None
        message_id = parse_id(message_id, "message_id") if message_id is not None else uuid.uuid4()
        agents = clean_known_agents(known_agents)
        wanted_agent = None if agent is None else clean_agent(agent)
        user_message = clean_message(role=Role.USER, content=content, id=user_message_id, metadata=metadata)
        if not fresh and (
            message_id == user_message.id
            or Message.objects.filter(pk=message_id).exists()
            or Run.objects.filter(message_id=message_id).exists()  # a turn answering under it, in any conversation
        ):
            # The answer could never be stored under a taken id: refuse before anything runs.
            raise Conflict(ID_TAKEN_MESSAGE, code="message_exists")
        if user_message_id is not None and Run.objects.filter(message_id=user_message.id).exists():
            # A running turn's answer will be stored under that id: the question may not take it first.
            raise Conflict(ID_TAKEN_MESSAGE, code="message_exists")
        replica = clean_replica(replica)
        run_id = uuid7()
        if (wanted_agent or "") in agents:
            plan = self._begin_in_new_conversation(scope, pk, agent_name=wanted_agent or "", message=user_message,
                                                   message_id=message_id, run_id=run_id, replica=replica)
            if plan is not None:
                return plan
        try:
            return self._begin_locked(scope, pk, agents=agents, wanted_agent=wanted_agent, user_message=user_message,
                                      message_id=message_id, run_id=run_id, replica=replica, fresh=fresh)
        except IntegrityError:
            # The user message's id is taken (PostgreSQL's one-statement writes roll the whole start back).
            raise message_conflict([user_message.id]) from None

    def _begin_locked(self, scope: Scope, pk: uuid.UUID, *, agents: frozenset[str], wanted_agent: str | None,
                      user_message: MessageInput, message_id: uuid.UUID, run_id: uuid.UUID, replica: str,
                      fresh: bool) -> TurnPlan:
        """:meth:`begin` under locks 1 and 2, in one transaction (its writes one statement on PostgreSQL)."""
        with transaction.atomic():
            now = timezone.now()
            for _ in range(LOCK_ATTEMPTS):
                row, conversation = lock_turn(pk)
                visible = conversation is not None and can_read(scope, conversation)
                agent_name = wanted_agent or (conversation.agent if visible else "")  # type: ignore[union-attr]
                if agent_name not in agents:
                    raise unknown_agent(agent_name)
                if conversation is None:
                    conversation = create_locked(scope, pk, agent=agent_name, now=now)
                    if conversation is None:
                        continue
                break
            else:
                raise contended()
            check_writable(scope, conversation)
            pending = pending_ids(pk)
            if pending:
                raise PendingInterrupts(pending=[str(interrupt_id) for interrupt_id in pending])
            if row is not None and is_waiting(row, now):
                raise Busy(occupant=occupant_of(row, now))
            events = []
            if row is not None and row.status in OPEN_STATUSES:
                # A new turn replaces a dead producer's (or one handed off that no replica claimed within
                # DEAD_AFTER): record the old one as lost, not running forever.
                events.append(lost_event(row.message_id, row.epoch))
                finish_runs(open_runs(pk, row.message_id), RunStatus.ABORTED, PRODUCER_LOST, now)
            epoch = conversation.epoch + 1
            events.append(running_event(message_id, run_id, epoch))
            claimed = dialect_for().start_in_locked_conversation(
                scope, pk, row_epoch=None if row is None else row.epoch, epoch=epoch, agent=agent_name,
                message=user_message, message_id=message_id, run_id=run_id, replica=replica, events=events, now=now,
            )
            if claimed is False:
                raise contended()
            if claimed is None:  # no one-statement start on this database: the writes one by one
                claim(conversation, row, message_id=message_id, run_id=run_id, replica=replica, now=now)
                position = set_conversation(
                    scope, conversation, messages=1, epoch=epoch, last_turn_status=LastTurnStatus.RUNNING, updated_at=now
                )
                insert_turn_message(pk, user_message, position, now)
                new_run(pk, run_id=run_id, message_id=message_id, name=agent_name, epoch=epoch, now=now)
                self.events.append(scope, pk, events, run_id=run_id)
        return self._plan(scope, pk, message_id=message_id, run_id=run_id, epoch=epoch, agent_name=agent_name,
                          resumed=False, fresh=fresh)

    def _begin_in_new_conversation(self, scope: Scope, pk: uuid.UUID, *, agent_name: str, message: MessageInput,
                                   message_id: uuid.UUID, run_id: uuid.UUID, replica: str) -> TurnPlan | None:
        """:meth:`begin` when ``pk`` names no conversation yet, in one statement (PostgreSQL); None when one exists
        (or the database has no one-statement start: the dialect writes nothing).

        Nothing can lock a conversation that does not exist yet, so no lock
        order is at stake; the plan needs no read (no recording, a transcript
        of the one message, no checkpoint).
        """
        try:
            stored = dialect_for().start_in_new_conversation(
                scope, pk, agent=agent_name, message=message, message_id=message_id, run_id=run_id,
                replica=replica, events=[running_event(message_id, run_id, 1)], now=timezone.now(),
            )
        except IntegrityError:
            raise message_conflict([message.id]) from None
        if stored is None:
            return None
        return TurnPlan(
            scope=scope, conversation_id=pk, message_id=message_id, run_id=run_id, epoch=1, agent_name=agent_name,
            resumed=False, start_index=0, transcript=[stored], checkpoint={}, answers={},
        )

    def continue_after_answers(
        self,
        scope: Scope,
        conversation_id: Any,
        answers: list[dict[str, Any]],
        *,
        resolved_by: str | None = None,
        replica: str = "",
    ) -> Continuation:
        """Commit the answers (all or nothing) and, when they release the turn, claim its next run, atomically.

        An interrupted run gets a continuation run; a turn whose producer died
        before it could go idle is taken over and resumed (``took_over``); a
        live producer sees the answers itself. Either the answers are stored
        and the turn claimed, or nothing is stored.
        """
        check_scope(scope)
        pk = lookup_id(conversation_id)
        replica = clean_replica(replica)
        with transaction.atomic():
            row, conversation = lock_turn(pk)
            check_writable(scope, conversation)
            resolved = self.interrupts.commit_batch(scope, pk, answers, resolved_by=resolved_by)
            if pending_ids(pk):
                return Continuation(resolved)
            now = timezone.now()
            interrupted = (
                Run.objects.filter(conversation_id=pk, status=RunStatus.INTERRUPTED, parent__isnull=True)
                .order_by("-started_at", "-id")
                .first()
            )
            if interrupted is not None:
                run_id = uuid7()
                epoch = claim(conversation, row, message_id=interrupted.message_id, run_id=run_id, replica=replica, now=now)
                set_conversation(scope, conversation, epoch=epoch, last_turn_status=LastTurnStatus.RUNNING)
                finish_runs(Run.objects.filter(pk=interrupted.pk), RunStatus.COMPLETED, None, now)
                agent_name = interrupted.name or conversation.agent
                new_run(pk, run_id=run_id, message_id=interrupted.message_id, name=agent_name, epoch=epoch, now=now)
                self.events.append(
                    scope, pk, [running_event(interrupted.message_id, run_id, epoch, continuation=True)], run_id=run_id
                )
                message_id, took_over = interrupted.message_id, False
            elif row is not None and row.status in OPEN_STATUSES and is_claimable(row, now):
                run_id = uuid7()
                message_id, took_over = row.message_id, True
                epoch, agent_name = self._take_over(scope, conversation, row, run_id=run_id, replica=replica, now=now)
            else:
                return Continuation(resolved)
        plan = self._plan(scope, pk, message_id=message_id, run_id=run_id, epoch=epoch, agent_name=agent_name,
                          resumed=True)
        return Continuation(resolved, plan, took_over)

    def resume(self, scope: Scope, conversation_id: Any, *, message_id: Any = None, replica: str = "") -> TurnPlan:
        """Take over a dead producer's (or a handed-off) turn at epoch + 1 with a new run; a dead producer's
        open runs are recorded as lost.

        A live turn is Busy (409); a finished one, another turn, or none is Gone (410).
        """
        check_scope(scope)
        pk = lookup_id(conversation_id)
        wanted = lookup_id(message_id, "message") if message_id is not None else None
        replica = clean_replica(replica)
        run_id = uuid7()
        with transaction.atomic():
            row, conversation = lock_turn(pk)
            conversation = check_writable(scope, conversation)
            now = timezone.now()
            if (
                row is None
                or row.status not in OPEN_STATUSES
                or (wanted is not None and row.message_id != wanted)
            ):
                raise Gone("This turn is not running, so it cannot be resumed.", code="turn_not_resumable")
            if not is_claimable(row, now):
                raise Busy(occupant=occupant_of(row, now))
            epoch, agent_name = self._take_over(scope, conversation, row, run_id=run_id, replica=replica, now=now)
        return self._plan(scope, pk, message_id=row.message_id, run_id=run_id, epoch=epoch, agent_name=agent_name,
                          resumed=True)

    def resume_many(self, claims: list[dict[str, Any]], *, replica: str = "") -> dict[uuid.UUID, TurnPlan | Exception]:
        """:meth:`resume` of each of ``claims`` as its conversation's owner, in one call; each plan or refusal.

        ``claims`` are ``{conversation_id, message_id}`` of handed-off turns (a hand-off listener's share
        of an announcement). When every one is still handed off as announced they are claimed together: the
        locks of the lock order and the previous runs each in one pass, the supervision rows, epochs and new
        runs each in one statement, one event append a turn, then each turn's plan (one claim at a time made
        eighteen round trips a turn, and a survivor's claims waited for each other on CPU it was short of).
        Otherwise each is claimed, or refused (Busy, Gone, NotFound), on its own, as :meth:`resume` does.
        """
        items = clean_claims(claims)
        replica = clean_replica(replica)
        if not items:
            return {}
        try:
            with transaction.atomic():
                claimed = self._claim_all_handed_off(items, replica)
        except _NotAllAtOnce:
            return resume_each(self, items, replica)
        return {pk: self._plan(scope, pk, message_id=message_id, run_id=run_id, epoch=epoch, agent_name=agent_name,
                               resumed=True)
                for pk, (scope, message_id, run_id, epoch, agent_name) in claimed.items()}

    def _claim_all_handed_off(
        self, items: list[tuple[uuid.UUID, uuid.UUID]], replica: str
    ) -> dict[uuid.UUID, tuple[Scope, uuid.UUID, uuid.UUID, int, str]]:
        """Inside the caller's transaction: claim every handed-off turn of ``items`` (sorted by conversation) together.

        ``{conversation_id: (owner scope, message id, run id, epoch, agent name)}``. Raises
        :class:`_NotAllAtOnce` (rolled back: the caller claims one turn at a time) when any turn is not
        handed off at its conversation's epoch with the announced message.
        """
        pks = [pk for pk, _ in items]
        rows = {row.pk: row for row in TurnSupervision.objects.select_for_update().filter(pk__in=pks).order_by("pk")}
        conversations = {c.pk: c for c in Conversation.objects.select_for_update().filter(pk__in=pks).order_by("pk")}
        for pk, message_id in items:
            row, conversation = rows.get(pk), conversations.get(pk)
            if (row is None or conversation is None or row.status != HANDED_OFF or row.message_id != message_id
                    or row.epoch != conversation.epoch):
                raise _NotAllAtOnce()
        now = timezone.now()
        turns = Q()
        for pk, message_id in items:
            turns |= Q(conversation_id=pk, message_id=message_id)
        previous: dict[uuid.UUID, Run] = {}
        for run in Run.objects.filter(turns, parent__isnull=True).order_by("-started_at", "-id").only("conversation_id", "name"):
            previous.setdefault(run.conversation_id, run)
        finish_runs(Run.objects.filter(turns, status__in=OPEN_RUN_STATUSES), RunStatus.ABORTED, PRODUCER_LOST, now)
        claimed: dict[uuid.UUID, tuple[Scope, uuid.UUID, uuid.UUID, int, str]] = {}
        for pk, message_id in items:
            conversation, row = conversations[pk], rows[pk]
            agent_name = (previous[pk].name if pk in previous and previous[pk].name else "") or conversation.agent
            claimed[pk] = (Scope(tenant=conversation.tenant, user=conversation.owner), message_id, uuid7(),
                           conversation.epoch + 1, agent_name)
            row.status, row.run_id, row.epoch, row.replica = SupervisionStatus.RUNNING, claimed[pk][2], claimed[pk][3], replica
            row.heartbeat_at = row.claimed_at = now
        TurnSupervision.objects.bulk_update(list(rows.values()), ["status", "run_id", "epoch", "replica", "heartbeat_at",
                                                                   "claimed_at"])
        Conversation.objects.filter(pk__in=pks).update(epoch=F("epoch") + 1, last_turn_status=LastTurnStatus.RUNNING)
        Run.objects.bulk_create([
            Run(id=run_id, conversation_id=pk, message_id=message_id, name=agent_name, status=RunStatus.RUNNING,
                epoch=epoch, started_at=now)
            for pk, (_scope, message_id, run_id, epoch, agent_name) in claimed.items()
        ])
        for pk, (scope, message_id, run_id, epoch, _agent_name) in claimed.items():
            self.events.append(scope, pk, [running_event(message_id, run_id, epoch, resumed=True, handed_off=True)],
                               run_id=run_id)
        return claimed

    def _take_over(self, scope: Scope, conversation: Conversation, row: TurnSupervision, *, run_id: uuid.UUID,
                   replica: str, now: datetime) -> tuple[int, str]:
        """Claim a dead producer's (or a handed-off) turn for a new run (under the locks); its epoch and agent.

        A handed-off turn's runs were closed by the hand-off, which recorded it: no ``producer_lost``.
        """
        pk = conversation.pk
        handed_off = row.status == HANDED_OFF
        previous = latest_run(pk, row.message_id)
        agent_name = (previous.name if previous is not None and previous.name else "") or conversation.agent
        finish_runs(open_runs(pk, row.message_id), RunStatus.ABORTED, PRODUCER_LOST, now)
        epoch = claim(conversation, row, message_id=row.message_id, run_id=run_id, replica=replica, now=now)
        set_conversation(scope, conversation, epoch=epoch, last_turn_status=LastTurnStatus.RUNNING)
        new_run(pk, run_id=run_id, message_id=row.message_id, name=agent_name, epoch=epoch, now=now)
        resumed = running_event(row.message_id, run_id, epoch, resumed=True, handed_off=handed_off or None)
        events = [resumed] if handed_off else [lost_event(row.message_id, row.epoch), resumed]
        self.events.append(scope, pk, events, run_id=run_id)
        return epoch, agent_name

    # -- the producer's transitions -------------------------------------------------------------

    def suspend(self, scope: Scope, conversation_id: Any, *, message_id: Any, run_id: Any, epoch: int) -> bool:
        """Park the run as interrupted and release the conversation, unless every question is answered.

        Under lock 1 (the fence), as answering is, so an answer lands either
        before this check (False: the run goes on) or after the run is parked
        (the answer starts a continuation). Fenced when a newer epoch holds it.
        """
        check_scope(scope)
        pk = lookup_id(conversation_id)
        message_id = parse_id(message_id, "message_id")
        run_id = parse_id(run_id, "run_id")
        with transaction.atomic():
            limit_lock_wait()
            fence(pk, epoch)
            if Conversation.objects.select_for_update().filter(pk=pk).first() is None:
                raise NotFound("No such conversation.")
            if not pending_ids(pk):
                return False
            Run.objects.filter(pk=run_id, status__in=OPEN_RUN_STATUSES).update(status=RunStatus.INTERRUPTED)
            TurnSupervision.objects.filter(pk=pk, epoch=epoch, message_id=message_id).update(
                status=SupervisionStatus.DONE, heartbeat_at=timezone.now()
            )
            self.events.append(scope, pk, [idle_event(message_id, run_id, "interrupted")], run_id=run_id)
        return True

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
        """Write the turn's end in one fenced transaction; False (nothing written) when fenced or gone."""
        check_scope(scope)
        pk = lookup_id(conversation_id)
        message_id = parse_id(message_id, "message_id")
        run_id = parse_id(run_id, "run_id")
        seal = clean_seal(seal)
        error = clean_error(error)
        answer = self._answer(message_id, run_id, message, stop_reason, error)
        try:
            with transaction.atomic():
                limit_lock_wait()
                fence(pk, epoch)
                conversation = Conversation.objects.select_for_update().filter(pk=pk).first()
                if conversation is None:
                    raise NotFound("No such conversation.")
                self._write_end(scope, conversation, answer, run_id=run_id, epoch=epoch, seal=seal,
                                stop_reason=stop_reason, error=error)
        except (Fenced, NotFound):
            return False
        return True

    def hand_off(self, scope: Scope, conversation_id: Any, *, message_id: Any, run_id: Any, epoch: int,
                 in_flight: str | None = None) -> int | None:
        """Release the turn ``epoch`` produces at a shutdown, in one fenced transaction; the epoch it is released at.

        The supervision row becomes ``handed_off`` at the conversation's next epoch (so ``epoch`` is
        fenced: its next write is refused), the turn's open runs are aborted with ``handed_off`` (not
        ``producer_lost``: a hand-off is not a failed resume) and a ``handed_off`` event is appended.
        The turn is not ended: :meth:`resume` claims it at once, with no ``DEAD_AFTER`` to wait, and
        :meth:`dead_turns` lists it. The producer flushed its recording and checkpoint before (each
        fenced by ``epoch``); ``in_flight`` ("model", "tool" or None) is what it stopped the agent in,
        which the next producer makes again, recorded in the event. None (nothing written) when fenced
        or the conversation is gone.
        """
        item = clean_hand_off(scope, conversation_id, message_id=message_id, run_id=run_id, epoch=epoch,
                              in_flight=in_flight)
        try:
            with transaction.atomic():
                limit_lock_wait()
                return self._release_handed_off(item)
        except (Fenced, NotFound):
            return None

    def hand_off_many(self, handoffs: list[dict[str, Any]]) -> dict[uuid.UUID, int]:
        """:meth:`hand_off` for each of a draining process's turns in one transaction; the epochs they are released at.

        Each item has the keyword arguments of :meth:`hand_off` (``scope``, ``conversation_id``,
        ``message_id``, ``run_id``, ``epoch``, optionally ``in_flight``). Every turn is fenced and
        released as :meth:`hand_off` does it, in a savepoint of its own, so a fenced or vanished one
        is left out of the answer (nothing of it written) and the others are released all the same.
        Returns ``{conversation_id: released_at}`` for the released ones. An invalid item (or one
        conversation twice) is Validation and nothing is written.
        """
        items = [clean_hand_off(**handoff) for handoff in handoffs]
        if len({item[1] for item in items}) != len(items):
            raise Validation("A conversation appears twice in one batch of hand-offs.")
        released: dict[uuid.UUID, int] = {}
        if not items:
            return released
        items.sort(key=lambda item: item[1])  # one lock order for every batch
        with transaction.atomic():
            limit_lock_wait()
            try:
                with transaction.atomic():
                    return self._release_all_handed_off(items)
            except (_NotAllAtOnce, Fenced, NotFound):
                pass  # rolled back: one turn at a time, each in a savepoint, sorts out which are released
            for item in items:
                try:
                    with transaction.atomic():
                        released[item[1]] = self._release_handed_off(item)
                except (Fenced, NotFound):
                    continue
        return released

    def _release_all_handed_off(
        self, items: list[tuple[Scope, uuid.UUID, uuid.UUID, uuid.UUID, int, str | None]]
    ) -> dict[uuid.UUID, int]:
        """Inside the caller's transaction: release every turn of ``items`` (sorted by conversation) together.

        The usual batch of a drain, every turn still held at its epoch: a few statements for them all
        (the locks of the lock order, each kind of row in one pass, in conversation order; the
        supervision rows, the conversations' epochs and the open runs each in one ``UPDATE``) and one
        event append per turn, where :meth:`_release_handed_off` makes eight round trips a turn (a
        replica's thirty turns took 0.35-0.47 s). Raises :class:`_NotAllAtOnce`, to be rolled back and
        done one turn at a time, when any turn is not so (fenced, gone, another turn at its epoch).
        """
        pks = [item[1] for item in items]
        rows = {row.pk: row for row in TurnSupervision.objects.select_for_update().filter(pk__in=pks).order_by("pk")}
        conversations = {c.pk: c for c in Conversation.objects.select_for_update().filter(pk__in=pks).order_by("pk")}
        for _scope, pk, message_id, _run_id, epoch, _in_flight in items:
            row, conversation = rows.get(pk), conversations.get(pk)
            if (row is None or conversation is None or row.status != SupervisionStatus.RUNNING or row.epoch != epoch
                    or row.message_id != message_id or conversation.epoch != epoch):
                raise _NotAllAtOnce()
        now = timezone.now()
        turns = Q()
        for _scope, pk, message_id, _run_id, epoch, _in_flight in items:
            turns |= Q(pk=pk, epoch=epoch, message_id=message_id)
        if TurnSupervision.objects.filter(turns, status=SupervisionStatus.RUNNING).update(
            status=HANDED_OFF, epoch=F("epoch") + 1, replica="", heartbeat_at=now
        ) != len(items):
            raise _NotAllAtOnce()  # the rows are locked by us: only a writer ignoring the lock order gets here
        Conversation.objects.filter(pk__in=pks).update(epoch=F("epoch") + 1)
        runs = Q()
        for _scope, pk, message_id, _run_id, _epoch, _in_flight in items:
            runs |= Q(conversation_id=pk, message_id=message_id)
        finish_runs(Run.objects.filter(runs, status__in=OPEN_RUN_STATUSES), RunStatus.ABORTED, HANDED_OFF_ERROR, now)
        for scope, pk, message_id, run_id, epoch, in_flight in items:
            self.events.append(scope, pk, [handed_off_event(message_id, run_id, epoch, epoch + 1, in_flight)], run_id=run_id)
        return {pk: epoch + 1 for _scope, pk, _message_id, _run_id, epoch, _in_flight in items}

    def _release_handed_off(self, item: tuple[Scope, uuid.UUID, uuid.UUID, uuid.UUID, int, str | None]) -> int:
        """Inside the caller's transaction: fence ``epoch`` and release its turn as handed off (Fenced, NotFound)."""
        scope, pk, message_id, run_id, epoch, in_flight = item
        fence(pk, epoch)
        conversation = Conversation.objects.select_for_update().filter(pk=pk).first()
        if conversation is None:
            raise NotFound("No such conversation.")
        now = timezone.now()
        released_at = conversation.epoch + 1
        released = TurnSupervision.objects.filter(
            pk=pk, epoch=epoch, message_id=message_id, status=SupervisionStatus.RUNNING
        ).update(status=HANDED_OFF, epoch=released_at, replica="", heartbeat_at=now)
        if not released:  # the fenced row holds another turn of this epoch: no writer makes that
            raise Fenced(conversation_id=str(pk), epoch=epoch)
        if not Conversation.objects.filter(pk=pk, epoch=conversation.epoch).update(epoch=released_at):
            raise contended()  # the row is locked by us: only a writer ignoring the lock order gets here
        finish_runs(open_runs(pk, message_id), RunStatus.ABORTED, HANDED_OFF_ERROR, now)
        event = handed_off_event(message_id, run_id, epoch, released_at, in_flight)
        self.events.append(scope, pk, [event], run_id=run_id)
        return released_at

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
        """End a dead producer's turn here with its recording's partial answer, fencing the producer.

        Busy while the producer is alive; False when no turn is running.
        """
        check_scope(scope)
        pk = lookup_id(conversation_id)
        seal = clean_seal(seal)
        error = clean_error(error)
        replica = clean_replica(replica)
        with transaction.atomic():
            row, conversation = lock_turn(pk)
            conversation = check_writable(scope, conversation)
            now = timezone.now()
            if row is None or row.status not in OPEN_STATUSES:
                return False
            if not is_claimable(row, now):
                raise Busy(occupant=occupant_of(row, now))
            record = StreamRecording.objects.filter(pk=pk, message_id=row.message_id).first()
            partial = record.message if record is not None else {"content": ""}
            run = latest_run(pk, row.message_id)
            run_id = run.pk if run is not None else None
            epoch = claim(conversation, row, message_id=row.message_id, run_id=run_id, replica=replica, now=now)
            conversation.epoch = epoch
            if run_id is not None:
                Run.objects.filter(pk=run_id).update(epoch=epoch)
                finish_runs(open_runs(pk, row.message_id).exclude(pk=run_id), RunStatus.ABORTED, PRODUCER_LOST, now)
            if row.status != HANDED_OFF:
                self.events.append(scope, pk, [lost_event(row.message_id, row.epoch)], run_id=run_id)
            answer = self._answer(row.message_id, run_id, partial, stop_reason, error)
            self._write_end(scope, conversation, answer, run_id=run_id, epoch=epoch, seal=seal, stop_reason=stop_reason,
                            error=error, also={"epoch": epoch})
        return True

    def _answer(self, message_id: uuid.UUID, run_id: uuid.UUID | None, message: Any, stop_reason: str,
                error: dict[str, str] | None) -> MessageInput:
        if not isinstance(message, dict):
            raise Validation("message must be a JSON object.", field="message")
        metadata: dict[str, Any] = {"stop_reason": stop_reason}
        if error:
            metadata["error"] = error
        return clean_message(
            role=Role.ASSISTANT, id=message_id, content=message.get("content", ""), tool_calls=message.get("tool_calls"),
            metadata=metadata, run_id=run_id,
        )

    def _write_end(self, scope: Scope, conversation: Conversation, answer: MessageInput, *, run_id: uuid.UUID | None,
                   epoch: int, seal: Seal, stop_reason: str, error: dict[str, str] | None,
                   also: dict[str, Any] | None = None) -> None:
        """The seal's writes under locks 1 and 2: message, run, supervision row, conversation, event."""
        pk = conversation.pk
        now = timezone.now()
        position = set_conversation(
            scope, conversation, messages=1, last_turn_status=seal.last_turn_status, updated_at=now, **(also or {})
        )
        insert_turn_message(pk, answer, position, now)
        if run_id is not None:
            finish_runs(Run.objects.filter(pk=run_id, status__in=OPEN_RUN_STATUSES), seal.run_status, error, now)
        # No run of an ended turn stays open: a child parked at an interrupt the turn never came back to is aborted.
        finish_runs(open_runs(pk, answer.id), RunStatus.ABORTED, TURN_ENDED, now)
        TurnSupervision.objects.filter(pk=pk, epoch=epoch, status=SupervisionStatus.RUNNING).update(
            status=seal.supervision_status, heartbeat_at=now
        )
        self.events.append(scope, pk, [idle_event(answer.id, run_id, stop_reason, error)], run_id=run_id)
        # The sealed turn as read_turn reads it once this commits: followers in this process apply it
        # without reading it back (see announce).
        fields = answer.fields
        view = TurnView(
            state=SupervisionStatus(seal.supervision_status).value, message_id=answer.id, run_id=run_id, epoch=epoch,
            final=final_of(fields.get("content", ""), fields.get("tool_calls"), fields.get("metadata")),
        )
        transaction.on_commit(lambda: announce(scope, pk, answer.id, run_id, view))

    # -- operators ------------------------------------------------------------------------------

    def force_release(self, conversation_id: Any, *, error: dict[str, Any] | None = None) -> bool:
        """End the running turn as errored and fence its producer (epoch + 1); False when none runs.

        Its open runs are aborted with ``error`` (default ``force_released``).
        """
        pk = lookup_id(conversation_id)
        error = FORCE_RELEASED if error is None else clean_error(error)
        with transaction.atomic():
            row, conversation = lock_turn(pk)
            if row is None or conversation is None or row.status not in OPEN_STATUSES:
                return False
            now = timezone.now()
            TurnSupervision.objects.filter(pk=pk, epoch=row.epoch).update(status=SupervisionStatus.ERRORED, heartbeat_at=now)
            Conversation.objects.filter(pk=pk).update(
                epoch=conversation.epoch + 1, last_turn_status=LastTurnStatus.ERRORED, updated_at=now
            )
            finish_runs(open_runs(pk, row.message_id), RunStatus.ABORTED, error, now)
        return True

    # -- reading --------------------------------------------------------------------------------

    def read_turn(self, scope: Scope | None, conversation_id: Any) -> TurnView:
        """The turn as a follower sees it now; NotFound when ``scope`` may not read the conversation."""
        pk = lookup_id(conversation_id)
        if scope is not None:
            check_scope(scope)
        # One statement on PostgreSQL: the conversation, its row, the recording and the answer.
        rows = dialect_for().read_turn_rows(pk)
        if rows is not None:
            conversation, row = rows.conversation, rows.supervision
        else:
            conversation = None
            if scope is not None:
                conversation = Conversation.objects.filter(pk=pk).only("tenant", "owner", "shared", "epoch").first()
            row = TurnSupervision.objects.filter(pk=pk).first()
        idle_epoch = 0
        if scope is not None:
            if conversation is None or not can_read(scope, conversation):
                raise NotFound("No such conversation.")
            idle_epoch = conversation.epoch
        status = status_of(row, idle_epoch=idle_epoch)
        view = TurnView(
            state=status.state, message_id=status.message_id, run_id=status.run_id, epoch=status.epoch,
            replica=status.replica, heartbeat_age=status.heartbeat_age,
        )
        if row is None:
            return view
        if rows is not None:
            view.record = rows.record
        else:
            record = StreamRecording.objects.filter(pk=pk, message_id=row.message_id).first()
            if record is not None:
                view.record = {"epoch": record.epoch, "index": record.index, "message": record.message}
        if status.state in (SupervisionStatus.DONE, SupervisionStatus.ERRORED):
            if rows is not None:
                message = rows.answer
            else:
                message = Message.objects.filter(conversation_id=pk, pk=row.message_id).first()
            if message is not None:
                view.final = final_of(message.content, message.tool_calls, message.metadata)
            else:
                pending = Interrupt.objects.filter(conversation_id=pk, status=InterruptStatus.PENDING).order_by(
                    "requested_at", "pk"
                )
                view.interrupts = [
                    {
                        "id": str(interrupt.pk),
                        "kind": interrupt.kind,
                        "payload": interrupt.payload,
                        "expires_at": interrupt.expires_at.isoformat() if interrupt.expires_at else None,
                    }
                    for interrupt in pending
                ]
                if view.interrupts:
                    view.state = TurnState.INTERRUPTED
        return view

    def answers(self, conversation_id: Any, message_id: Any) -> dict[str, Any]:
        """The answered interrupts of a turn, ``{interrupt id: response}``."""
        answered = Interrupt.objects.filter(
            conversation_id=lookup_id(conversation_id),
            run__message_id=parse_id(message_id, "message_id"),
            status=InterruptStatus.RESOLVED,
        )
        return {str(pk): response for pk, response in answered.values_list("pk", "response")}

    def stop_requested(self, run_ids: Collection[Any]) -> set[uuid.UUID]:
        """The runs among ``run_ids`` whose stop was requested (from any process): one statement."""
        ids = [parse_id(run_id, "run_id") for run_id in run_ids]
        if not ids:
            return set()
        return set(Run.objects.filter(pk__in=ids, cancel_requested=True).values_list("pk", flat=True))

    def scope_of(self, conversation_id: Any) -> Scope:
        """The owner's scope of a conversation (operators, the reaper); NotFound when it does not exist."""
        row = Conversation.objects.filter(pk=lookup_id(conversation_id)).values_list("tenant", "owner").first()
        if row is None:
            raise NotFound("No such conversation.")
        return Scope(tenant=row[0], user=row[1])

    def dead_turns(self, *, now: datetime | None = None, limit: int = 100) -> list[tuple[Scope, uuid.UUID, uuid.UUID]]:
        """``(owner scope, conversation id, message id)`` of running turns whose producer is dead, and of handed-off
        turns, oldest first."""
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise Validation("limit must be a whole number, 1 or more.", field="limit")
        # A handed-off turn is claimable at once: no DEAD_AFTER to wait for.
        rows = (
            TurnSupervision.objects.filter(dead_q(now or timezone.now()) | Q(status=HANDED_OFF))
            .order_by("heartbeat_at", "pk")
            .values_list("conversation__tenant", "conversation__owner", "conversation_id", "message_id")[:limit]
        )
        return [(Scope(tenant=tenant, user=owner), pk, message_id) for tenant, owner, pk, message_id in rows]

    def plan_of(self, scope: Scope, conversation_id: Any, *, message_id: Any, run_id: Any, epoch: int, agent_name: str,
                resumed: bool) -> TurnPlan:
        """The plan of a run a transition claimed earlier, read again (a worker of ``TURN_RUNNER = "tasks"``)."""
        check_scope(scope)
        return self._plan(scope, lookup_id(conversation_id), message_id=parse_id(message_id, "message_id"),
                          run_id=parse_id(run_id, "run_id"), epoch=clean_lease_epoch(epoch), agent_name=str(agent_name),
                          resumed=bool(resumed))

    # -- after the transaction ------------------------------------------------------------------

    def _plan(self, scope: Scope, pk: uuid.UUID, *, message_id: uuid.UUID, run_id: uuid.UUID, epoch: int,
              agent_name: str, resumed: bool, fresh: bool = False) -> TurnPlan:
        """What the runtime needs to drive the run the transition just claimed (read after its commit).

        ``fresh``: the turn's message id was made by the transition, so no recording is at it yet.
        """
        record = None
        if not fresh:
            record = StreamRecording.objects.filter(pk=pk, message_id=message_id).values_list("index", flat=True).first()
        checkpoint: dict[str, Any] = {}
        if resumed:
            state = self.checkpoints.load(pk)
            checkpoint = state if state.get("message_id") == str(message_id) else {}
        return TurnPlan(
            scope=scope,
            conversation_id=pk,
            message_id=message_id,
            run_id=run_id,
            epoch=epoch,
            agent_name=agent_name,
            resumed=resumed,
            start_index=record or 0,
            transcript=list(Message.objects.filter(conversation_id=pk).order_by("position")),
            checkpoint=checkpoint,
            answers=self.answers(pk, message_id) if resumed else {},
        )
