"""Settling a batch of interrupts one answer at a time (TanStack's ``resolve(interruptId)``), through the turn store.

An answer to one interrupt while others of the batch wait is recorded and the
turn stays parked (its run interrupted, no continuation run, no new epoch);
the settlement that leaves nothing pending continues the turn, atomically, as
a whole batch does. Two settlements of the last two questions at once, on real
threads and real transactions, continue the turn exactly once.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from agent_persistence.models import Interrupt, Run, TurnSupervision
from agent_persistence.runtime.lifecycle import begin_turn
from agent_persistence.scope import Scope
from agent_persistence.stores import interrupt_store, run_store, supervision_store, turn_store
from agent_persistence.testing.concurrency import run_in_threads

ALICE = Scope(tenant="", user="alice")
RACE_ROUNDS = 4


def parked_turn(questions: int) -> tuple[uuid.UUID, Any, list[uuid.UUID]]:
    """A turn parked on ``questions`` pending interrupts, as a producer leaves it (run interrupted, turn done)."""
    conversation_id = uuid.uuid4()
    plan = begin_turn(ALICE, conversation_id, content="hello", agent="scripted")
    ids = [uuid.uuid4() for _ in range(questions)]
    for interrupt_id in ids:
        interrupt_store().create(
            ALICE, conversation_id, id=interrupt_id, run_id=plan.run_id, kind="generic", payload={"question": "ok?"}
        )
    run_store().set_status(ALICE, plan.run_id, "interrupted")
    supervision_store().finish(conversation_id, epoch=plan.epoch, message_id=plan.message_id, status="done")
    return conversation_id, plan, ids


def runs_of(conversation_id: uuid.UUID) -> list[tuple[str, uuid.UUID]]:
    return sorted((run.status, run.pk) for run in Run.objects.filter(conversation_id=conversation_id))


@pytest.mark.django_db
def test_one_answer_of_a_batch_is_recorded_and_keeps_the_turn_parked() -> None:
    conversation_id, plan, (first, second, third) = parked_turn(3)
    continuation = turn_store().continue_after_answers(ALICE, conversation_id, [{"id": second, "response": "yes"}])
    assert continuation.plan is None and [i.pk for i in continuation.interrupts] == [second]
    assert Interrupt.objects.get(pk=second).status == "resolved"
    assert Interrupt.objects.get(pk=second).response == "yes"
    assert {Interrupt.objects.get(pk=pk).status for pk in (first, third)} == {"pending"}
    assert runs_of(conversation_id) == [("interrupted", plan.run_id)]
    assert TurnSupervision.objects.get(pk=conversation_id).epoch == plan.epoch
    # The second of three: still parked. The last: the turn goes on at epoch + 1 with a continuation run.
    assert turn_store().continue_after_answers(ALICE, conversation_id, [{"id": first, "status": "cancelled"}]).plan is None
    last = turn_store().continue_after_answers(ALICE, conversation_id, [{"id": third, "response": 3}])
    assert last.plan is not None and last.plan.epoch == plan.epoch + 1 and last.plan.message_id == plan.message_id
    assert runs_of(conversation_id) == sorted([("completed", plan.run_id), ("running", last.plan.run_id)])


@pytest.mark.django_db(transaction=True)
def test_two_last_settlements_at_once_continue_the_turn_exactly_once() -> None:
    for _ in range(RACE_ROUNDS):
        conversation_id, plan, (first, second, third) = parked_turn(3)
        assert turn_store().continue_after_answers(ALICE, conversation_id, [{"id": first, "response": 1}]).plan is None
        last_two = [second, third]

        def settle(index: int) -> Any:
            continuation = turn_store().continue_after_answers(
                ALICE, conversation_id, [{"id": last_two[index], "response": index}]
            )
            return None if continuation.plan is None else continuation.plan.run_id

        outcomes = run_in_threads(2, settle)
        continued = [run_id for run_id in outcomes if run_id is not None]
        assert len(continued) == 1, outcomes
        assert all(isinstance(outcome, (uuid.UUID, type(None))) for outcome in outcomes), outcomes
        assert {Interrupt.objects.get(pk=pk).status for pk in (first, second, third)} == {"resolved"}
        assert runs_of(conversation_id) == sorted([("completed", plan.run_id), ("running", continued[0])])
        supervision = TurnSupervision.objects.get(pk=conversation_id)
        assert (supervision.epoch, supervision.status, supervision.run_id) == (plan.epoch + 1, "running", continued[0])
