"""The in-memory turn store: the turn transitions of :class:`~agent_persistence.stores.turns.TurnStore`.

Each transition reads, decides and writes under the family's one lock, so it
is atomic and there is no lock order to keep; a refusal raises before the
first write (or, where the ORM store would roll back, undoes what it wrote),
so it changes nothing. Input is cleaned by the ORM store's functions, and the
event and interrupt writes go through the family's memory stores, inside the
lock (it is re-entrant).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Collection

from django.utils import timezone

from ...exceptions import Busy, Conflict, ConversationNotOwned, Fenced, Gone, NotFound, PendingInterrupts, Validation
from ...ids import uuid7
from ...models import Conversation, Message, Run, TurnSupervision
from ...scope import Scope
from ...statuses import OPEN_RUN_STATUSES, InterruptStatus, LastTurnStatus, Role, RunStatus, SupervisionStatus
from ..protocols import Continuation, Seal, TurnPlan, TurnStoreProtocol, TurnView
from ..rules.base import check_scope, lookup_id, parse_id
from ..rules.conversations import ID_TAKEN_MESSAGE, MessageInput, clean_agent, clean_message
from ..rules.runs import clean_error
from ..rules.fencing import clean_lease_epoch
from ..rules.supervision import HANDED_OFF, OPEN_STATUSES, clean_replica, is_claimable, is_dead, is_waiting, occupant_of, status_of
from ..rules.turns import (
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
from ..twins import twins_of
from .checkpoints import MemoryCheckpointStore
from .database import DEFAULT_DATABASE, MemoryDatabase, clone
from .events import MemoryEventStore
from .interrupts import MemoryInterruptStore, by_request

RUNNING = SupervisionStatus.RUNNING.value


class MemoryTurnStore(twins_of(TurnStoreProtocol)):
    """The turn aggregate in a :class:`MemoryDatabase`; see :class:`~agent_persistence.stores.protocols.TurnStoreProtocol`."""

    def __init__(self, database: MemoryDatabase | None = None) -> None:
        self.db = database or DEFAULT_DATABASE
        self.events = MemoryEventStore(self.db)
        self.interrupts = MemoryInterruptStore(self.db)
        self.checkpoints = MemoryCheckpointStore(self.db)

    # -- helpers (the caller holds the lock) ----------------------------------------------------

    def _writable(self, scope: Scope, conversation: Conversation | None) -> Conversation:
        if conversation is None or not self.db.may_read(scope, conversation):
            raise NotFound("No such conversation.")
        if conversation.owner != scope.user:
            raise ConversationNotOwned()
        return conversation

    def _pending(self, pk: uuid.UUID) -> list[uuid.UUID]:
        pending = [
            interrupt
            for interrupt in self.db.interrupts.values()
            if interrupt.conversation_id == pk and interrupt.status == InterruptStatus.PENDING
        ]
        return [interrupt.pk for interrupt in by_request(pending)]

    def _runs_of_turn(self, pk: uuid.UUID, message_id: uuid.UUID) -> list[Run]:
        runs = [run for run in self.db.runs.values() if run.conversation_id == pk and run.message_id == message_id]
        return sorted(runs, key=lambda run: (run.started_at, run.pk), reverse=True)

    def _finish(self, runs: list[Run], status: RunStatus, error: dict[str, str] | None, now: datetime) -> None:
        for run in runs:
            if run.status in OPEN_RUN_STATUSES:
                run.status, run.error, run.finished_at = status, error, now

    def _claim(self, conversation: Conversation, *, message_id: uuid.UUID, run_id: uuid.UUID | None, replica: str,
               now: datetime) -> int:
        """Write the supervision row at the conversation's next epoch and raise the conversation to it."""
        epoch = conversation.epoch + 1
        self.db.supervision[conversation.pk] = TurnSupervision(
            conversation_id=conversation.pk,
            status=RUNNING,
            message_id=message_id,
            run_id=run_id,
            epoch=epoch,
            replica=replica,
            heartbeat_at=now,
            claimed_at=now,
        )
        conversation.epoch = epoch
        return epoch

    def _new_run(self, pk: uuid.UUID, *, run_id: uuid.UUID, message_id: uuid.UUID, name: str, epoch: int,
                 now: datetime) -> None:
        self.db.runs[run_id] = Run(
            id=run_id, conversation_id=pk, message_id=message_id, name=name, status=RunStatus.RUNNING, epoch=epoch,
            started_at=now,
        )

    def _insert_message(self, conversation: Conversation, message: MessageInput, now: datetime) -> None:
        if message.id in self.db.messages:
            raise Conflict("A message with this id already exists.", code="message_exists", id=str(message.id))
        self.db.messages[message.id] = Message(
            id=message.id,
            conversation_id=conversation.pk,
            position=conversation.next_position,
            run_id=message.run_id,
            created_at=now,
            updated_at=now,
            **message.fields,
        )
        conversation.next_position += 1

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
        check_scope(scope)
        pk = parse_id(conversation_id, "conversation")
        fresh = message_id is None
        message_id = parse_id(message_id, "message_id") if message_id is not None else uuid.uuid4()
        agents = clean_known_agents(known_agents)
        wanted_agent = None if agent is None else clean_agent(agent)
        user_message = clean_message(role=Role.USER, content=content, id=user_message_id, metadata=metadata)
        replica = clean_replica(replica)
        run_id = uuid7()
        with self.db.lock:
            if not fresh and (
                message_id == user_message.id
                or message_id in self.db.messages
                or any(run.message_id == message_id for run in self.db.runs.values())
            ):
                raise Conflict(ID_TAKEN_MESSAGE, code="message_exists")
            if user_message_id is not None and any(run.message_id == user_message.id for run in self.db.runs.values()):
                raise Conflict(ID_TAKEN_MESSAGE, code="message_exists")
            now = timezone.now()
            conversation = self.db.conversations.get(pk)
            visible = conversation is not None and self.db.may_read(scope, conversation)
            agent_name = wanted_agent or (conversation.agent if visible else "")  # type: ignore[union-attr]
            if agent_name not in agents:
                raise unknown_agent(agent_name)
            created = conversation is None
            if created:
                conversation = Conversation(
                    id=pk, tenant=scope.tenant, owner=scope.user, agent=agent_name, created_at=now, updated_at=now
                )
            self._writable(scope, conversation)
            pending = self._pending(pk)
            if pending:
                raise PendingInterrupts(pending=[str(interrupt_id) for interrupt_id in pending])
            row = self.db.supervision.get(pk)
            if row is not None and is_waiting(row, now):
                raise Busy(occupant=occupant_of(row, now))
            if user_message.id in self.db.messages:
                self._insert_message(conversation, user_message, now)  # raises the Conflict, before any write
            if created:
                self.db.conversations[pk] = conversation
            events = []
            if row is not None and row.status in OPEN_STATUSES:
                events.append(lost_event(row.message_id, row.epoch))
                self._finish(self._runs_of_turn(pk, row.message_id), RunStatus.ABORTED, PRODUCER_LOST, now)
            epoch = self._claim(conversation, message_id=message_id, run_id=run_id, replica=replica, now=now)
            conversation.last_turn_status, conversation.updated_at = LastTurnStatus.RUNNING, now
            self._insert_message(conversation, user_message, now)
            self._new_run(pk, run_id=run_id, message_id=message_id, name=agent_name, epoch=epoch, now=now)
            events.append(running_event(message_id, run_id, epoch))
            self.events.append(scope, pk, events, run_id=run_id)
            return self._plan(scope, pk, message_id=message_id, run_id=run_id, epoch=epoch, agent_name=agent_name,
                              resumed=False)

    def continue_after_answers(
        self,
        scope: Scope,
        conversation_id: Any,
        answers: list[dict[str, Any]],
        *,
        resolved_by: str | None = None,
        replica: str = "",
    ) -> Continuation:
        check_scope(scope)
        pk = lookup_id(conversation_id)
        replica = clean_replica(replica)
        with self.db.lock:
            conversation = self._writable(scope, self.db.conversations.get(pk))
            # Validated whole before it writes, so a refused batch leaves everything as it was.
            resolved = self.interrupts.commit_batch(scope, pk, answers, resolved_by=resolved_by)
            if self._pending(pk):
                return Continuation(resolved)
            now = timezone.now()
            row = self.db.supervision.get(pk)
            interrupted = sorted(
                (
                    run
                    for run in self.db.runs.values()
                    if run.conversation_id == pk and run.status == RunStatus.INTERRUPTED and run.parent_id is None
                ),
                key=lambda run: (run.started_at, run.pk),
                reverse=True,
            )
            if interrupted:
                parked = interrupted[0]
                run_id = uuid7()
                epoch = self._claim(conversation, message_id=parked.message_id, run_id=run_id, replica=replica, now=now)
                conversation.last_turn_status = LastTurnStatus.RUNNING
                parked.status, parked.error, parked.finished_at = RunStatus.COMPLETED, None, now
                agent_name = parked.name or conversation.agent
                self._new_run(pk, run_id=run_id, message_id=parked.message_id, name=agent_name, epoch=epoch, now=now)
                self.events.append(
                    scope, pk, [running_event(parked.message_id, run_id, epoch, continuation=True)], run_id=run_id
                )
                message_id, took_over = parked.message_id, False
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
        check_scope(scope)
        pk = lookup_id(conversation_id)
        wanted = lookup_id(message_id, "message") if message_id is not None else None
        replica = clean_replica(replica)
        run_id = uuid7()
        with self.db.lock:
            conversation = self._writable(scope, self.db.conversations.get(pk))
            now = timezone.now()
            row = self.db.supervision.get(pk)
            if row is None or row.status not in OPEN_STATUSES or (wanted is not None and row.message_id != wanted):
                raise Gone("This turn is not running, so it cannot be resumed.", code="turn_not_resumable")
            if not is_claimable(row, now):
                raise Busy(occupant=occupant_of(row, now))
            turn_message_id = row.message_id
            epoch, agent_name = self._take_over(scope, conversation, row, run_id=run_id, replica=replica, now=now)
            return self._plan(scope, pk, message_id=turn_message_id, run_id=run_id, epoch=epoch, agent_name=agent_name,
                              resumed=True)

    def _take_over(self, scope: Scope, conversation: Conversation, row: TurnSupervision, *, run_id: uuid.UUID,
                   replica: str, now: datetime) -> tuple[int, str]:
        pk = conversation.pk
        runs = self._runs_of_turn(pk, row.message_id)
        previous = next((run for run in runs if run.parent_id is None), None)
        agent_name = (previous.name if previous is not None and previous.name else "") or conversation.agent
        self._finish(runs, RunStatus.ABORTED, PRODUCER_LOST, now)
        old_message_id, old_epoch, handed_off = row.message_id, row.epoch, row.status == HANDED_OFF
        epoch = self._claim(conversation, message_id=row.message_id, run_id=run_id, replica=replica, now=now)
        conversation.last_turn_status = LastTurnStatus.RUNNING
        self._new_run(pk, run_id=run_id, message_id=old_message_id, name=agent_name, epoch=epoch, now=now)
        # A handed-off turn's runs were closed by the hand-off, which recorded it: no producer_lost.
        resumed = running_event(old_message_id, run_id, epoch, resumed=True, handed_off=handed_off or None)
        events = [resumed] if handed_off else [lost_event(old_message_id, old_epoch), resumed]
        self.events.append(scope, pk, events, run_id=run_id)
        return epoch, agent_name

    # -- the producer's transitions -------------------------------------------------------------

    def suspend(self, scope: Scope, conversation_id: Any, *, message_id: Any, run_id: Any, epoch: int) -> bool:
        check_scope(scope)
        pk = lookup_id(conversation_id)
        message_id = parse_id(message_id, "message_id")
        run_id = parse_id(run_id, "run_id")
        with self.db.lock:
            now = timezone.now()
            self.db.fence(pk, epoch, now)
            if pk not in self.db.conversations:
                raise NotFound("No such conversation.")
            if not self._pending(pk):
                return False
            run = self.db.runs.get(run_id)
            if run is not None and run.status in OPEN_RUN_STATUSES:
                run.status = RunStatus.INTERRUPTED
            row = self.db.supervision.get(pk)
            if row is not None and (row.epoch, row.message_id) == (epoch, message_id):
                row.status, row.heartbeat_at = SupervisionStatus.DONE.value, now
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
        check_scope(scope)
        pk = lookup_id(conversation_id)
        message_id = parse_id(message_id, "message_id")
        run_id = parse_id(run_id, "run_id")
        seal = clean_seal(seal)
        error = clean_error(error)
        answer = self._answer(message_id, run_id, message, stop_reason, error)
        with self.db.lock:
            try:
                self.db.fence(pk, epoch, timezone.now())
            except Fenced:
                return False
            conversation = self.db.conversations.get(pk)
            if conversation is None:
                return False
            self._write_end(scope, conversation, answer, run_id=run_id, epoch=epoch, seal=seal, stop_reason=stop_reason,
                            error=error)
        announce(scope, pk, answer.id, run_id)
        return True

    def hand_off(self, scope: Scope, conversation_id: Any, *, message_id: Any, run_id: Any, epoch: int,
                 in_flight: str | None = None) -> int | None:
        item = clean_hand_off(scope, conversation_id, message_id=message_id, run_id=run_id, epoch=epoch,
                              in_flight=in_flight)
        with self.db.lock:
            return self._release_handed_off(item)

    def hand_off_many(self, handoffs: list[dict[str, Any]]) -> dict[uuid.UUID, int]:
        items = [clean_hand_off(**handoff) for handoff in handoffs]
        if len({item[1] for item in items}) != len(items):
            raise Validation("A conversation appears twice in one batch of hand-offs.")
        released: dict[uuid.UUID, int] = {}
        with self.db.lock:
            for item in items:
                released_at = self._release_handed_off(item)
                if released_at is not None:
                    released[item[1]] = released_at
        return released

    def _release_handed_off(self, item: tuple[Scope, uuid.UUID, uuid.UUID, uuid.UUID, int, str | None]) -> int | None:
        """Under the database lock: fence ``epoch`` and release its turn as handed off; None when fenced or gone."""
        scope, pk, message_id, run_id, epoch, in_flight = item
        now = timezone.now()
        try:
            self.db.fence(pk, epoch, now)
        except Fenced:
            return None
        conversation = self.db.conversations.get(pk)
        row = self.db.supervision.get(pk)
        if conversation is None or row is None or row.message_id != message_id:
            return None
        released_at = conversation.epoch + 1
        row.status, row.epoch, row.replica, row.heartbeat_at = HANDED_OFF, released_at, "", now
        conversation.epoch = released_at
        self._finish(self._runs_of_turn(pk, message_id), RunStatus.ABORTED, HANDED_OFF_ERROR, now)
        self.events.append(scope, pk, [handed_off_event(message_id, run_id, epoch, released_at, in_flight)], run_id=run_id)
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
        check_scope(scope)
        pk = lookup_id(conversation_id)
        seal = clean_seal(seal)
        error = clean_error(error)
        replica = clean_replica(replica)
        with self.db.lock:
            conversation = self._writable(scope, self.db.conversations.get(pk))
            now = timezone.now()
            row = self.db.supervision.get(pk)
            if row is None or row.status not in OPEN_STATUSES:
                return False
            if not is_claimable(row, now):
                raise Busy(occupant=occupant_of(row, now))
            record = self.db.recordings.get(pk)
            partial = clone(record.message) if record is not None and record.message_id == row.message_id else {"content": ""}
            runs = self._runs_of_turn(pk, row.message_id)
            run = next((run for run in runs if run.parent_id is None), None)
            run_id = run.pk if run is not None else None
            old_message_id, old_epoch, handed_off = row.message_id, row.epoch, row.status == HANDED_OFF
            answer = self._answer(old_message_id, run_id, partial, stop_reason, error)
            epoch = self._claim(conversation, message_id=old_message_id, run_id=run_id, replica=replica, now=now)
            if run is not None:
                run.epoch = epoch
                self._finish([other for other in runs if other is not run], RunStatus.ABORTED, PRODUCER_LOST, now)
            if not handed_off:
                self.events.append(scope, pk, [lost_event(old_message_id, old_epoch)], run_id=run_id)
            self._write_end(scope, conversation, answer, run_id=run_id, epoch=epoch, seal=seal, stop_reason=stop_reason,
                            error=error)
        announce(scope, pk, answer.id, run_id)
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
                   epoch: int, seal: Seal, stop_reason: str, error: dict[str, str] | None) -> None:
        pk = conversation.pk
        now = timezone.now()
        self._insert_message(conversation, answer, now)
        conversation.last_turn_status, conversation.updated_at = seal.last_turn_status, now
        run = None if run_id is None else self.db.runs.get(run_id)
        if run is not None:
            self._finish([run], seal.run_status, error, now)
        self._finish(self._runs_of_turn(pk, answer.id), RunStatus.ABORTED, TURN_ENDED, now)
        row = self.db.supervision.get(pk)
        if row is not None and row.epoch == epoch and row.status == RUNNING:
            row.status, row.heartbeat_at = seal.supervision_status, now
        self.events.append(scope, pk, [idle_event(answer.id, run_id, stop_reason, error)], run_id=run_id)

    # -- operators ------------------------------------------------------------------------------

    def force_release(self, conversation_id: Any, *, error: dict[str, Any] | None = None) -> bool:
        pk = lookup_id(conversation_id)
        error = FORCE_RELEASED if error is None else clean_error(error)
        with self.db.lock:
            row, conversation = self.db.supervision.get(pk), self.db.conversations.get(pk)
            if row is None or conversation is None or row.status not in OPEN_STATUSES:
                return False
            now = timezone.now()
            row.status, row.heartbeat_at = SupervisionStatus.ERRORED.value, now
            conversation.epoch += 1
            conversation.last_turn_status, conversation.updated_at = LastTurnStatus.ERRORED, now
            self._finish(self._runs_of_turn(pk, row.message_id), RunStatus.ABORTED, error, now)
            return True

    # -- reading --------------------------------------------------------------------------------

    def read_turn(self, scope: Scope | None, conversation_id: Any) -> TurnView:
        pk = lookup_id(conversation_id)
        with self.db.lock:
            idle_epoch = 0
            if scope is not None:
                check_scope(scope)
                conversation = self.db.conversations.get(pk)
                if conversation is None or not self.db.may_read(scope, conversation):
                    raise NotFound("No such conversation.")
                idle_epoch = conversation.epoch
            row = self.db.supervision.get(pk)
            row = None if row is None else clone(row)
            status = status_of(row, idle_epoch=idle_epoch)
            view = TurnView(
                state=status.state, message_id=status.message_id, run_id=status.run_id, epoch=status.epoch,
                replica=status.replica, heartbeat_age=status.heartbeat_age,
            )
            if row is None:
                return view
            record = self.db.recordings.get(pk)
            if record is not None and record.message_id == row.message_id:
                view.record = {"epoch": record.epoch, "index": record.index, "message": clone(record.message)}
            if status.state in (SupervisionStatus.DONE, SupervisionStatus.ERRORED):
                message = self.db.messages.get(row.message_id)
                if message is not None and message.conversation_id == pk:
                    metadata = message.metadata or {}
                    final = {"role": Role.ASSISTANT.value, "content": clone(message.content)}
                    if message.tool_calls:
                        final["tool_calls"] = clone(message.tool_calls)
                    view.final = {"message": final, "stop_reason": metadata.get("stop_reason"), "error": metadata.get("error")}
                else:
                    view.interrupts = [
                        {
                            "id": str(interrupt.pk),
                            "kind": interrupt.kind,
                            "payload": clone(interrupt.payload),
                            "expires_at": interrupt.expires_at.isoformat() if interrupt.expires_at else None,
                        }
                        for interrupt in (self.db.interrupts[interrupt_id] for interrupt_id in self._pending(pk))
                    ]
                    if view.interrupts:
                        view.state = "interrupted"
            return view

    def answers(self, conversation_id: Any, message_id: Any) -> dict[str, Any]:
        pk = lookup_id(conversation_id)
        message_id = parse_id(message_id, "message_id")
        with self.db.lock:
            return {
                str(interrupt.pk): clone(interrupt.response)
                for interrupt in by_request(self.db.interrupts.values())
                if interrupt.conversation_id == pk
                and interrupt.status == InterruptStatus.RESOLVED
                and interrupt.run_id in self.db.runs
                and self.db.runs[interrupt.run_id].message_id == message_id
            }

    def stop_requested(self, run_ids: Collection[Any]) -> set[uuid.UUID]:
        ids = [parse_id(run_id, "run_id") for run_id in run_ids]
        with self.db.lock:
            return {run_id for run_id in ids if run_id in self.db.runs and self.db.runs[run_id].cancel_requested}

    def plan_of(self, scope: Scope, conversation_id: Any, *, message_id: Any, run_id: Any, epoch: int, agent_name: str,
                resumed: bool) -> TurnPlan:
        check_scope(scope)
        with self.db.lock:
            return self._plan(scope, lookup_id(conversation_id), message_id=parse_id(message_id, "message_id"),
                              run_id=parse_id(run_id, "run_id"), epoch=clean_lease_epoch(epoch), agent_name=str(agent_name),
                              resumed=bool(resumed))

    def resume_many(self, claims: list[dict[str, Any]], *, replica: str = "") -> dict[uuid.UUID, TurnPlan | Exception]:
        return resume_each(self, clean_claims(claims), clean_replica(replica))

    def scope_of(self, conversation_id: Any) -> Scope:
        pk = lookup_id(conversation_id)
        with self.db.lock:
            conversation = self.db.conversations.get(pk)
            if conversation is None:
                raise NotFound("No such conversation.")
            return Scope(tenant=conversation.tenant, user=conversation.owner)

    def dead_turns(self, *, now: datetime | None = None, limit: int = 100) -> list[tuple[Scope, uuid.UUID, uuid.UUID]]:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise Validation("limit must be a whole number, 1 or more.", field="limit")
        now = now or timezone.now()
        with self.db.lock:
            rows = sorted(
                (row for row in self.db.supervision.values() if row.status == HANDED_OFF or is_dead(row, now)),
                key=lambda row: (row.heartbeat_at, row.pk),
            )[:limit]
            turns = []
            for row in rows:
                conversation = self.db.conversations[row.pk]
                turns.append((Scope(tenant=conversation.tenant, user=conversation.owner), row.pk, row.message_id))
            return turns

    # -- the plan -------------------------------------------------------------------------------

    def _plan(self, scope: Scope, pk: uuid.UUID, *, message_id: uuid.UUID, run_id: uuid.UUID, epoch: int,
              agent_name: str, resumed: bool) -> TurnPlan:
        record = self.db.recordings.get(pk)
        checkpoint: dict[str, Any] = {}
        if resumed:
            state = self.checkpoints.load(pk)
            checkpoint = state if state.get("message_id") == str(message_id) else {}
        transcript = sorted((m for m in self.db.messages.values() if m.conversation_id == pk), key=lambda m: m.position)
        return TurnPlan(
            scope=scope,
            conversation_id=pk,
            message_id=message_id,
            run_id=run_id,
            epoch=epoch,
            agent_name=agent_name,
            resumed=resumed,
            start_index=record.index if record is not None and record.message_id == message_id else 0,
            transcript=[clone(message) for message in transcript],
            checkpoint=checkpoint,
            answers=self.answers(pk, message_id) if resumed else {},
        )
