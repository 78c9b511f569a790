"""The turn lifecycle's entry points: start, continue after interrupts, resume after a crash, cancel, reap.

Each does its database work in one transaction first (so a refusal changes
nothing), then launches a :class:`~.producer.Producer` as an asyncio task on
the running event loop and returns a :class:`TurnHandle` at once. Await
``handle.task`` to wait for the outcome.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass
from typing import Any

from asgiref.sync import sync_to_async
from django.db import transaction

from ..conf import app_settings
from ..exceptions import Conflict, PendingInterrupts
from ..ids import uuid7
from ..models import Conversation, Interrupt, Run
from ..scope import Scope
from ..stores import (
    checkpoint_store,
    conversation_store,
    event_store,
    interrupt_store,
    recording_store,
    run_store,
    supervision_store,
)
from ..stores.base import lookup_id, parse_id, readable_conversation, writable_conversation
from ..stores.supervision import lock_supervision
from .agents import get_agent
from .producer import Outcome, Producer, Supervisor, TurnPlan, answers_for_turn, replica_id, seal_turn

logger = logging.getLogger(__name__)

PRODUCER_LOST = {"code": "producer_lost", "message": "The process producing this turn stopped."}


@dataclass
class TurnHandle:
    conversation_id: uuid.UUID
    message_id: uuid.UUID
    run_id: uuid.UUID
    epoch: int
    resumed: bool
    task: "asyncio.Task[Outcome]"


def _transcript(scope: Scope, conversation_id: uuid.UUID) -> list[Any]:
    store = conversation_store()
    messages: list[Any] = []
    while True:
        page = store.list_messages(scope, conversation_id, limit=app_settings.MAX_PAGE_SIZE, offset=len(messages))
        messages.extend(page.items)
        if not page.has_more:
            return messages


def _checkpoint_for(conversation_id: uuid.UUID, message_id: uuid.UUID) -> dict[str, Any]:
    state = checkpoint_store().load(conversation_id)
    return state if state.get("message_id") == str(message_id) else {}


def _recording_index(conversation_id: uuid.UUID, message_id: uuid.UUID) -> int:
    record = recording_store().read_unscoped(conversation_id)
    return record.index if record is not None and record.message_id == message_id else 0


def _plan(scope: Scope, conversation: Conversation, *, message_id: uuid.UUID, run_id: uuid.UUID, epoch: int,
          agent_name: str, resumed: bool) -> TurnPlan:
    return TurnPlan(
        scope=scope,
        conversation_id=conversation.pk,
        message_id=message_id,
        run_id=run_id,
        epoch=epoch,
        agent_name=agent_name,
        resumed=resumed,
        # Indexes keep rising across runs of one turn, so followers never see one twice.
        start_index=_recording_index(conversation.pk, message_id),
        transcript=_transcript(scope, conversation.pk),
        checkpoint=_checkpoint_for(conversation.pk, message_id) if resumed else {},
        answers=answers_for_turn(conversation.pk, message_id) if resumed else {},
    )


def _running_event(message_id: uuid.UUID, run_id: uuid.UUID, epoch: int, **extra: Any) -> dict[str, Any]:
    return {"type": "status_running", "data": {"message_id": str(message_id), "run_id": str(run_id), "epoch": epoch, **extra}}


def _abort_lost_runs(scope: Scope, conversation_id: uuid.UUID, message_id: uuid.UUID) -> None:
    """Record the unfinished runs of a dead producer's turn as aborted (``producer_lost``)."""
    lost = Run.objects.filter(conversation_id=conversation_id, message_id=message_id, status__in=("running", "interrupted"))
    for run in lost:
        run_store().finish(scope, run.pk, "aborted", error=PRODUCER_LOST)


# -- start -------------------------------------------------------------------------------------


def begin_turn(scope: Scope, conversation_id: Any, *, content: Any, agent: str | None = None,
               message_id: Any = None, user_message_id: Any = None, metadata: dict[str, Any] | None = None) -> TurnPlan:
    """Store the user message, claim the conversation and create the run, in one transaction.

    Refusals (PendingInterrupts, Busy, Validation, ...) roll everything back.
    """
    conversation_id = parse_id(conversation_id, "conversation")
    message_id = parse_id(message_id, "message_id") if message_id is not None else uuid.uuid4()
    run_id = uuid7()
    existing = Conversation.objects.filter(pk=conversation_id).only("agent").first()
    agent_name = agent or (existing.agent if existing else "")
    get_agent(agent_name)  # an unknown agent is refused before anything is written
    with transaction.atomic():
        lock_supervision(conversation_id)  # lock order: supervision row, then conversation (see stores.supervision)
        if existing is not None:
            writable_conversation(scope, conversation_id, for_update=True)
            pending = list(interrupt_store().pending(scope, conversation_id))
            if pending:
                raise PendingInterrupts(pending=[str(interrupt.pk) for interrupt in pending])
        conversation_store().append_message(
            scope, conversation_id, role="user", content=content, id=user_message_id, metadata=metadata,
            create=True, agent=agent_name,
        )
        claim = supervision_store().claim(scope, conversation_id, message_id=message_id, run_id=run_id, replica=replica_id())
        events = [_running_event(message_id, run_id, claim.epoch)]
        if claim.taken_over and claim.previous is not None:
            # A new turn replaces a dead producer's: record the old one as lost, not running forever.
            events.insert(0, {"type": "producer_lost", "data": {"message_id": str(claim.previous.message_id), "epoch": claim.previous.epoch}})
            _abort_lost_runs(scope, conversation_id, claim.previous.message_id)
        run_store().create_or_resume(scope, conversation_id, id=run_id, message_id=message_id, name=agent_name, epoch=claim.epoch)
        Conversation.objects.filter(pk=conversation_id).update(last_turn_status="running")
        event_store().append(scope, conversation_id, events, run_id=run_id)
        conversation = Conversation.objects.get(pk=conversation_id)
    return _plan(scope, conversation, message_id=message_id, run_id=run_id, epoch=claim.epoch, agent_name=agent_name, resumed=False)


def launch(plan: TurnPlan) -> TurnHandle:
    """Drive ``plan`` as an asyncio task on the running loop."""
    producer = Producer(plan, get_agent(plan.agent_name))
    task = asyncio.get_running_loop().create_task(producer.drive(), name=f"agent_persistence.turn.{plan.message_id}")
    producer.task = task
    Supervisor.current().add(producer)  # visible (heartbeat, stop) before the task first runs
    return TurnHandle(plan.conversation_id, plan.message_id, plan.run_id, plan.epoch, plan.resumed, task)


async def start_turn(scope: Scope, conversation_id: Any, *, content: Any, agent: str | None = None,
                     message_id: Any = None, user_message_id: Any = None,
                     metadata: dict[str, Any] | None = None) -> TurnHandle:
    """Start a turn: the conversation is created on its first user message."""
    plan = await sync_to_async(begin_turn)(
        scope, conversation_id, content=content, agent=agent, message_id=message_id,
        user_message_id=user_message_id, metadata=metadata,
    )
    return launch(plan)


# -- continue after interrupts -------------------------------------------------------------------


def begin_continuation(scope: Scope, conversation_id: Any, answers: list[dict[str, Any]], *,
                       resolved_by: str | None = None) -> tuple[list[Interrupt], TurnPlan | None]:
    """Commit the answers (all or nothing) and, when they release the turn, drive it on.

    An interrupted run gets a continuation run; a run whose producer died
    before it could go idle is resumed; a live producer sees the answers
    itself. A repeated identical batch returns the first outcome and starts
    nothing.
    """
    pk = lookup_id(conversation_id)
    with transaction.atomic():
        row = lock_supervision(pk)  # lock order: supervision row, then conversation (see stores.supervision)
        resolved = interrupt_store().commit_batch(scope, pk, answers, resolved_by=resolved_by)
        conversation = writable_conversation(scope, pk, for_update=True)
        if interrupt_store().has_pending(pk):
            return resolved, None
        interrupted = Run.objects.filter(conversation=conversation, status="interrupted").order_by("-started_at").first()
        if interrupted is None:
            dead = row is not None and supervision_store().status(scope, pk).state == "dead"
            message_id = row.message_id if row is not None else None
        else:
            run_id = uuid7()
            claim = supervision_store().claim(scope, pk, message_id=interrupted.message_id, run_id=run_id, replica=replica_id())
            run_store().finish(scope, interrupted.pk, "completed")
            run_store().create_or_resume(
                scope, pk, id=run_id, message_id=interrupted.message_id, name=interrupted.name, epoch=claim.epoch
            )
            event_store().append(
                scope, pk, [_running_event(interrupted.message_id, run_id, claim.epoch, continuation=True)], run_id=run_id
            )
    if interrupted is None:
        return resolved, (begin_resume(scope, pk, message_id=message_id) if dead else None)
    plan = _plan(scope, conversation, message_id=interrupted.message_id, run_id=run_id, epoch=claim.epoch,
                 agent_name=interrupted.name or conversation.agent, resumed=True)
    return resolved, plan


async def continue_turn(scope: Scope, conversation_id: Any, answers: list[dict[str, Any]], *,
                        resolved_by: str | None = None) -> tuple[list[Interrupt], TurnHandle | None]:
    resolved, plan = await sync_to_async(begin_continuation)(scope, conversation_id, answers, resolved_by=resolved_by)
    return resolved, (launch(plan) if plan is not None else None)


# -- resume after a crash ---------------------------------------------------------------------------


def begin_resume(scope: Scope, conversation_id: Any, *, message_id: Any = None) -> TurnPlan:
    """Claim a dead producer's turn at epoch + 1; its last run is recorded as lost.

    A live turn is Busy (409); a finished one, or none, is Gone (410).
    """
    conversation = readable_conversation(scope, conversation_id)
    if message_id is None:
        row = supervision_store().read(conversation.pk)
        message_id = row.message_id if row is not None else uuid.uuid4()
    message_id = lookup_id(message_id, "message")
    run_id = uuid7()
    with transaction.atomic():
        claim = supervision_store().claim_for_resume(scope, conversation.pk, message_id=message_id, replica=replica_id())
        _abort_lost_runs(scope, conversation.pk, message_id)
        agent_name = conversation.agent
        previous = Run.objects.filter(conversation=conversation, message_id=message_id).order_by("-started_at").first()
        if previous is not None and previous.name:
            agent_name = previous.name
        run_store().create_or_resume(scope, conversation.pk, id=run_id, message_id=message_id, name=agent_name, epoch=claim.epoch)
        lost_epoch = claim.previous.epoch if claim.previous is not None else None
        event_store().append(
            scope,
            conversation.pk,
            [
                {"type": "producer_lost", "data": {"message_id": str(message_id), "epoch": lost_epoch}},
                _running_event(message_id, run_id, claim.epoch, resumed=True),
            ],
            run_id=run_id,
        )
    return _plan(scope, conversation, message_id=message_id, run_id=run_id, epoch=claim.epoch, agent_name=agent_name, resumed=True)


async def resume_turn(scope: Scope, conversation_id: Any, *, message_id: Any = None) -> TurnHandle:
    plan = await sync_to_async(begin_resume)(scope, conversation_id, message_id=message_id)
    return launch(plan)


# -- stop ---------------------------------------------------------------------------------------------


def request_stop(scope: Scope, conversation_id: Any) -> Run:
    """Flag the active run of the conversation for a stop; its producer (on any process) sees it within one heartbeat."""
    conversation = writable_conversation(scope, conversation_id)
    run = run_store().find_active_run(scope, conversation.pk)
    if run is None:
        raise Conflict("No turn is running in this conversation.", code="no_turn_running")
    return run_store().request_cancel(scope, run.pk)


async def cancel_turn(scope: Scope, conversation_id: Any) -> Run:
    """Stop the conversation's turn: it ends as cancelled and keeps its partial answer.

    The local producer stops at once; one in another process at its next
    heartbeat; a dead producer's turn is closed out here.
    """
    run = await sync_to_async(request_stop)(scope, conversation_id)
    producer = Supervisor.current().get(run.conversation_id)
    if producer is not None:
        producer.stop(Outcome.CANCELLED)
        return run
    status = await supervision_store().astatus(scope, run.conversation_id)
    if status.state == "dead":
        await sync_to_async(close_out_dead_turn)(scope, run.conversation_id, Outcome.CANCELLED)
    return run


# -- dead turns ------------------------------------------------------------------------------------------


def close_out_dead_turn(scope: Scope, conversation_id: uuid.UUID, outcome: Outcome = Outcome.ERRORED) -> bool:
    """End a dead producer's turn here, with the partial answer of its recording, without re-driving it."""
    row = supervision_store().read(conversation_id)
    if row is None:
        return False
    claim = supervision_store().claim_for_resume(scope, conversation_id, message_id=row.message_id, replica=replica_id())
    record = recording_store().read_unscoped(conversation_id)
    message = record.message if record is not None and record.message_id == row.message_id else {"content": ""}
    run = Run.objects.filter(conversation_id=conversation_id, message_id=row.message_id).order_by("-started_at").first()
    event_store().append(scope, conversation_id, [{"type": "producer_lost", "data": {"message_id": str(row.message_id), "epoch": row.epoch}}])
    if run is None:
        return False
    Run.objects.filter(pk=run.pk).update(epoch=claim.epoch)
    return seal_turn(
        scope,
        conversation_id,
        message_id=row.message_id,
        run_id=run.pk,
        epoch=claim.epoch,
        message=message,
        outcome=outcome,
        error=PRODUCER_LOST if outcome is Outcome.ERRORED else None,
    )


def force_release(conversation_id: uuid.UUID) -> bool:
    """Operator action: end the conversation's running turn as errored and fence its producer.

    The supervision row becomes errored at a raised epoch (the producer's next
    write is refused), the turn's open runs are aborted (``force_released``)
    and the conversation reads ``errored``. False when no turn was running.
    """
    with transaction.atomic():
        row = lock_supervision(conversation_id)
        if row is None or not supervision_store().force_release(conversation_id):
            return False
        error = {"code": "force_released", "message": "An operator released this conversation."}
        open_runs = Run.objects.filter(conversation_id=conversation_id, message_id=row.message_id, status__in=("running", "interrupted"))
        for run_id in open_runs.values_list("pk", flat=True):
            run_store().abort_stuck(run_id, error=error)
        Conversation.objects.filter(pk=conversation_id).update(last_turn_status="errored")
    return True


def stop_turn_now(conversation_id: uuid.UUID) -> Run:
    """Operator action: stop the conversation's turn as its owner would, from any process.

    A live producer sees the stop within one heartbeat; a dead producer's turn
    is closed out here as cancelled with its partial answer.
    """
    conversation = Conversation.objects.get(pk=conversation_id)
    scope = Scope(tenant=conversation.tenant, user=conversation.owner)
    run = request_stop(scope, conversation_id)
    if supervision_store().status(scope, conversation_id).state == "dead":
        close_out_dead_turn(scope, conversation.pk, Outcome.CANCELLED)
    return run


async def reap_dead_turns(*, resume: bool, limit: int = 100) -> list[uuid.UUID]:
    """Resume (in this process) or close out every turn whose producer is dead; returns their conversations."""
    dead = await supervision_store().alist_dead(limit=limit)
    handled = []
    for row in dead:
        conversation = await Conversation.objects.aget(pk=row.conversation_id)
        scope = Scope(tenant=conversation.tenant, user=conversation.owner)
        try:
            if resume:
                await resume_turn(scope, conversation.pk, message_id=row.message_id)
            else:
                await sync_to_async(close_out_dead_turn)(scope, conversation.pk)
        except Exception:  # noqa: BLE001 - another reaper may have taken it; go on with the rest
            logger.info("Could not reap the turn of conversation %s", conversation.pk, exc_info=True)
            continue
        handled.append(conversation.pk)
    return handled


async def reap_forever() -> None:
    """The in-process reaper (``REAPER_ENABLED``): resume dead turns here every ``REAPER_INTERVAL``."""
    while True:
        await asyncio.sleep(app_settings.REAPER_INTERVAL)
        try:
            await reap_dead_turns(resume=True)
        except Exception:  # noqa: BLE001 - keep sweeping through a database outage
            logger.exception("The reaper's sweep failed; retrying.")


__all__ = [
    "TurnHandle",
    "begin_turn",
    "cancel_turn",
    "close_out_dead_turn",
    "continue_turn",
    "force_release",
    "reap_dead_turns",
    "reap_forever",
    "request_stop",
    "resume_turn",
    "start_turn",
    "stop_turn_now",
]
