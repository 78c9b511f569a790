"""Turn starts and appends racing on one conversation: the one-statement writes keep every counter gap-free.

On PostgreSQL a start in an existing conversation writes the claim, the
counters, the user message, the run and the events in one statement under
locks 1 and 2, and message and event appends claim their numbers in the
statement that inserts; on SQLite the same transitions take several
statements. Either way, real threads racing on committed rows must leave one
active turn, positions ``0..n-1`` and seqs ``1..n``.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest

from agent_persistence.exceptions import Busy
from agent_persistence.statuses import LastTurnStatus, RunStatus, SupervisionStatus
from agent_persistence.stores import conversation_store, event_store, turn_store
from agent_persistence.stores.protocols import Seal
from agent_persistence.testing.actors import ALICE
from agent_persistence.testing.concurrency import run_in_threads

AGENTS = frozenset({"helper"})
COMPLETED = Seal(RunStatus.COMPLETED, SupervisionStatus.DONE, LastTurnStatus.COMPLETE)
RACERS = 6


def begin(conversation_id: uuid.UUID, content: str) -> Any:
    return turn_store().begin(ALICE, conversation_id, content=content, known_agents=AGENTS, agent="helper")


def seal(plan: Any) -> bool:
    return turn_store().seal(
        ALICE, plan.conversation_id, message_id=plan.message_id, run_id=plan.run_id, epoch=plan.epoch,
        message={"content": "done"}, seal=COMPLETED, stop_reason="completed",
    )


def positions(conversation_id: uuid.UUID) -> list[int]:
    return [message.position for message in conversation_store().list_messages(ALICE, conversation_id, limit=1000).items]


def seqs(conversation_id: uuid.UUID) -> list[int]:
    return [event.seq for event in event_store().list(ALICE, conversation_id, limit=1000).events]


def race_begins(conversation_id: uuid.UUID) -> list[Any]:
    start = threading.Barrier(RACERS)

    def racer(index: int) -> Any:
        start.wait(30)
        try:
            return begin(conversation_id, f"start {index}")
        except Busy:
            return "busy"

    return run_in_threads(RACERS, racer, timeout=120)


@pytest.mark.django_db(transaction=True)
def test_concurrent_begins_in_an_existing_conversation_admit_one_at_the_next_epoch() -> None:
    conversation = conversation_store().create(ALICE, agent="helper")
    conversation_store().append_message(ALICE, conversation.id, role="user", content="before any turn")
    for round_number in range(1, 4):
        outcomes = race_begins(conversation.id)
        winners = [outcome for outcome in outcomes if outcome != "busy"]
        assert len(winners) == 1, outcomes
        plan = winners[0]
        assert not isinstance(plan, BaseException), plan
        assert plan.epoch == round_number
        assert [message.position for message in plan.transcript] == list(range(2 * round_number))
        assert (plan.transcript[-1].role, plan.transcript[-1].content) in {("user", f"start {i}") for i in range(RACERS)}
        assert seal(plan)
        assert positions(conversation.id) == list(range(2 * round_number + 1))
        assert seqs(conversation.id) == list(range(1, 2 * round_number + 1))  # status_running, status_idle per turn
    stored = conversation_store().get(ALICE, conversation.id)
    assert (stored.epoch, stored.next_position, stored.last_event_seq) == (3, 7, 6)
    assert stored.last_turn_status == LastTurnStatus.COMPLETE
    assert event_store().summary(ALICE, [conversation.id])[conversation.id].stop_reason == "completed"


@pytest.mark.django_db(transaction=True)
def test_appends_racing_a_start_keep_positions_and_seqs_gap_free() -> None:
    conversation = conversation_store().create(ALICE, agent="helper")
    appends_each = 10
    start = threading.Barrier(3)

    def worker(index: int) -> Any:
        start.wait(30)
        if index == 0:
            return begin(conversation.id, "start")
        for number in range(appends_each):
            if index == 1:
                conversation_store().append_message(ALICE, conversation.id, role="assistant", content=f"m{number}")
            else:
                event_store().append(ALICE, conversation.id, [{"type": "text_delta", "data": {"n": number}}])
        return None

    plan, *rest = run_in_threads(3, worker, timeout=120)
    assert not [outcome for outcome in [plan, *rest] if isinstance(outcome, BaseException)], [plan, *rest]
    assert plan.epoch == 1
    assert positions(conversation.id) == list(range(appends_each + 1))
    assert seqs(conversation.id) == list(range(1, appends_each + 2))
    types = [event.type for event in event_store().list(ALICE, conversation.id, limit=1000).events]
    assert types.count("status_running") == 1 and types.count("text_delta") == appends_each
    stored = conversation_store().get(ALICE, conversation.id)
    assert (stored.next_position, stored.last_event_seq, stored.epoch) == (appends_each + 1, appends_each + 1, 1)
