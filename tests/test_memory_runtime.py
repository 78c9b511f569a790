"""The turn runtime end to end on the in-memory store family, with no database.

These tests carry no ``django_db`` mark, so pytest-django refuses any
database access: every read and write of the runtime must go through the
memory stores selected by ``STORES`` (the in-memory family). Real producers run on a real
event loop with the scripted agents of ``tests/agents.py``: start, stream,
interrupt, answer, cancel, and a producer that dies mid-answer, resumed in
the same process from its checkpoint.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest
from django.test import override_settings

from agent_persistence.exceptions import PendingInterrupts
from agent_persistence.runtime.producer import Outcome
from agent_persistence.runtime.lifecycle import cancel_turn, continue_turn, resume_turn, start_turn
from agent_persistence.signals import conversation_updated
from agent_persistence.stores import (
    checkpoint_store,
    conversation_store,
    event_store,
    interrupt_store,
    run_store,
    supervision_store,
    turn_store,
)
from agent_persistence.stores.memory import reset_memory_stores
from agent_persistence.stores.memory.turns import MemoryTurnStore
from tests.agents import ANSWER, CHUNKS, TOOL_AT

FAST = {
    "HEARTBEAT_INTERVAL": 0.1,
    "DEAD_AFTER": 0.6,
    "RECORDING_FLUSH_INTERVAL": 0.05,
    "CHECKPOINT_INTERVAL": 0.1,
    "ENCRYPTION_KEYS": ["cw_0x689RpI-jtRR7oE8h_eQsKImvJapLeSbXpwF4e4="],
    "AGENTS": {
        "scripted": "tests.agents.ScriptedAgent",
        "approval": "tests.agents.ApprovalAgent",
        "echo": "tests.agents.EchoAgent",
    },
}


@pytest.fixture(autouse=True)
def memory_family(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> Any:
    """The whole family in memory, emptied before and after each test."""
    monkeypatch.setenv("AP_TOOL_LOG", str(tmp_path / "tools.log"))
    monkeypatch.setenv("AP_CHUNK_DELAY", "0.005")
    reset_memory_stores()
    with override_settings(AGENT_PERSISTENCE={**FAST, "STORES": "agent_persistence.stores.memory.family"}):
        reset_memory_stores()
        yield
    reset_memory_stores()


def tool_runs(tmp_path: Any) -> list[str]:
    log = tmp_path / "tools.log"
    return log.read_text().splitlines() if log.exists() else []


def messages(scope: Any, conversation_id: uuid.UUID) -> list[Any]:
    return conversation_store().list_messages(scope, conversation_id).items


def event_types(scope: Any, conversation_id: uuid.UUID) -> list[str]:
    return [event.type for event in event_store().list(scope, conversation_id).events]


async def until(condition: Any, timeout: float = 10.0) -> None:
    """Poll ``condition()`` (a loaded machine is slow: a generous deadline, never a fixed sleep)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met")
        await asyncio.sleep(0.01)


def test_the_memory_family_is_what_the_accessors_hand_out() -> None:
    assert isinstance(turn_store(), MemoryTurnStore)
    assert type(conversation_store()).__module__ == "agent_persistence.stores.memory.conversations"


def test_a_turn_streams_to_a_follower_and_stores_its_answer_and_outcome(alice: Any, tmp_path: Any) -> None:
    conversation_id = uuid.uuid4()
    updates: list[dict[str, Any]] = []

    def receiver(**kwargs: Any) -> None:
        updates.append(kwargs)

    async def scenario() -> Any:
        handle = await start_turn(alice, conversation_id, content="hello", agent="scripted")
        seen: list[int] = []
        while not handle.task.done():
            view = await turn_store().aread_turn(alice, conversation_id)
            if view.record is not None:
                assert ANSWER.startswith(view.record["message"]["content"])
                seen.append(view.record["index"])
            await asyncio.sleep(0.02)
        return handle, await handle.task, seen

    conversation_updated.connect(receiver)
    try:
        handle, outcome, seen = asyncio.run(scenario())
    finally:
        conversation_updated.disconnect(receiver)
    assert outcome is Outcome.COMPLETED
    assert len(set(seen)) > 1 and seen == sorted(seen)  # the follower saw the answer grow
    stored = messages(alice, conversation_id)
    assert [(m.role, m.content) for m in stored] == [("user", "hello"), ("assistant", ANSWER)]
    assert stored[1].id == handle.message_id
    assert stored[1].tool_calls[0]["result"] == {"answer": "result of q1"}
    assert run_store().get(alice, handle.run_id).status == "completed"
    assert supervision_store().read(conversation_id).status == "done"
    assert conversation_store().get(alice, conversation_id).last_turn_status == "complete"
    assert event_types(alice, conversation_id) == ["status_running", "status_idle"]
    view = turn_store().read_turn(alice, conversation_id)
    assert view.state == "done" and view.final["message"]["content"] == ANSWER
    assert tool_runs(tmp_path) == ["start q1", "done q1"]
    assert [(u["conversation_id"], u["message_id"]) for u in updates] == [(conversation_id, handle.message_id)]


def test_an_interrupt_parks_the_turn_until_answered_and_the_tool_runs_once(alice: Any, tmp_path: Any) -> None:
    conversation_id = uuid.uuid4()

    async def scenario() -> Any:
        first = await start_turn(alice, conversation_id, content="do it", agent="approval")
        assert await first.task is Outcome.INTERRUPTED
        with pytest.raises(PendingInterrupts):
            await start_turn(alice, conversation_id, content="again", agent="approval")
        view = await turn_store().aread_turn(alice, conversation_id)
        assert view.state == "interrupted" and len(view.interrupts) == 1
        (pending,) = await interrupt_store().apending(alice, conversation_id)
        answer = [{"id": str(pending.pk), "response": {"approved": True}}]
        resolved, second = await continue_turn(alice, conversation_id, answer)
        assert resolved[0].status == "resolved" and second is not None
        assert second.message_id == first.message_id and second.run_id != first.run_id
        assert await second.task is Outcome.COMPLETED
        again, third = await continue_turn(alice, conversation_id, answer)
        assert third is None and again[0].response == {"approved": True}
        return first, second

    first, second = asyncio.run(scenario())
    (answer,) = [m for m in messages(alice, conversation_id) if m.role == "assistant"]
    assert (answer.id, answer.content) == (first.message_id, ANSWER)
    assert tool_runs(tmp_path) == ["start q1", "done q1"]
    statuses = {run.pk: run.status for run in run_store().list(alice, conversation_id).items}
    assert statuses == {first.run_id: "completed", second.run_id: "completed"}
    assert conversation_store().get(alice, conversation_id).last_turn_status == "complete"


def test_a_stop_ends_the_turn_as_cancelled_and_keeps_the_partial_answer(alice: Any) -> None:
    conversation_id = uuid.uuid4()

    async def scenario() -> Any:
        handle = await start_turn(alice, conversation_id, content="go", agent="scripted")
        await until(lambda: (turn_store().read_turn(alice, conversation_id).record or {}).get("index", 0) > 3)
        await cancel_turn(alice, conversation_id)
        return handle, await handle.task

    handle, outcome = asyncio.run(scenario())
    assert outcome is Outcome.CANCELLED
    (answer,) = [m for m in messages(alice, conversation_id) if m.role == "assistant"]
    assert answer.content and ANSWER.startswith(answer.content) and answer.content != ANSWER
    assert answer.metadata["stop_reason"] == "cancelled"
    assert run_store().get(alice, handle.run_id).status == "aborted"
    assert conversation_store().get(alice, conversation_id).last_turn_status == "cancelled"


def test_a_producer_that_dies_mid_answer_is_resumed_from_its_checkpoint(
    alice: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The producer task is killed (no seal, no more heartbeats); once it reads dead, resume re-drives it here."""
    conversation_id = uuid.uuid4()
    monkeypatch.setenv("AP_CHUNK_DELAY", "0.02")  # long enough a turn to kill it between the tool and the end
    assert len(CHUNKS) > TOOL_AT + 5

    def checkpointed_past_the_tool() -> bool:
        state = checkpoint_store().load(conversation_id)
        return state.get("agent", {}).get("next", 0) > TOOL_AT + 2

    async def scenario() -> Any:
        dying = await start_turn(alice, conversation_id, content="go", agent="scripted")
        await until(checkpointed_past_the_tool)
        assert not dying.task.done()
        dying.task.cancel()  # a crash: the producer stops without sealing and stops heartbeating
        assert await dying.task is Outcome.ABANDONED
        assert turn_store().read_turn(alice, conversation_id).state == "alive"
        await until(lambda: supervision_store().status(alice, conversation_id).state == "dead")
        resumed = await resume_turn(alice, conversation_id)
        view = await turn_store().aread_turn(alice, conversation_id)
        assert (view.run_id, view.epoch) == (resumed.run_id, resumed.epoch)
        return dying, resumed, await resumed.task

    dying, resumed, outcome = asyncio.run(scenario())
    assert outcome is Outcome.COMPLETED
    assert resumed.resumed and resumed.message_id == dying.message_id
    assert (resumed.epoch, resumed.run_id != dying.run_id) == (dying.epoch + 1, True)
    (answer,) = [m for m in messages(alice, conversation_id) if m.role == "assistant"]
    assert answer.content == ANSWER  # nothing lost, nothing generated twice
    assert tool_runs(tmp_path) == ["start q1", "done q1"]  # the completed tool call was restored, not rerun
    lost = run_store().get(alice, dying.run_id)
    assert lost.status == "aborted" and lost.error["code"] == "producer_lost"
    assert run_store().get(alice, resumed.run_id).status == "completed"
    assert event_types(alice, conversation_id) == ["status_running", "producer_lost", "status_running", "status_idle"]
    assert supervision_store().read(conversation_id).run_id == resumed.run_id


def test_a_drain_hands_the_turn_off_and_a_resume_finishes_it_at_once_from_its_checkpoint(alice: Any, tmp_path: Any) -> None:
    """The hand-off at a shutdown on the memory family: released at epoch + 1, listed for the reaper with no
    DEAD_AFTER wait, resumed from the checkpoint with the tool's recorded result."""
    from agent_persistence.runtime import shutdown

    conversation_id = uuid.uuid4()
    try:
        async def drained() -> Any:
            handle = await start_turn(alice, conversation_id, content="hello", agent="scripted")
            await until(lambda: len(tool_runs(tmp_path)) == 2 and len(turn_store().read_turn(alice, conversation_id)
                                                                      .record["message"]["content"]) > 0)
            report = await shutdown.drain(grace=0)
            return handle, await handle.task, report

        handle, outcome, report = asyncio.run(drained())
    finally:
        shutdown.resume_taking_turns()
    assert outcome is Outcome.HANDED_OFF and report.handed_off == 1
    view = turn_store().read_turn(alice, conversation_id)
    assert (view.state, view.epoch) == ("handing_off", handle.epoch + 1)
    assert (alice, conversation_id, handle.message_id) in turn_store().dead_turns()

    async def resumed() -> Any:
        resume = await resume_turn(alice, conversation_id)
        return resume, await resume.task

    resume, outcome = asyncio.run(resumed())
    assert outcome is Outcome.COMPLETED and resume.epoch == handle.epoch + 2
    assert messages(alice, conversation_id)[-1].content == ANSWER
    assert tool_runs(tmp_path) == ["start q1", "done q1"]
    assert "producer_lost" not in event_types(alice, conversation_id)
