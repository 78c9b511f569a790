"""The turn runtime in one process: start, outcomes, the 409s, interrupts, stop, fencing.

Each test drives real producers on a real event loop (``asyncio.run``) against
the real database; the agents are the scripted ones of ``tests/agents.py``.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connections
from django.test import override_settings

from agent_persistence.exceptions import Busy, NotFound, PendingInterrupts, Validation
from agent_persistence.models import Conversation, Event, Interrupt, Message, Run, TurnSupervision
from agent_persistence.runtime.producer import Outcome
from agent_persistence.runtime.lifecycle import cancel_turn, continue_turn, start_turn
from agent_persistence.signals import conversation_updated
from agent_persistence.stores import supervision_store
from tests.agents import ANSWER

pytestmark = pytest.mark.django_db(transaction=True)

FAST = {
    "HEARTBEAT_INTERVAL": 0.1,
    "DEAD_AFTER": 0.6,
    "RECORDING_FLUSH_INTERVAL": 0.05,
    "CHECKPOINT_INTERVAL": 0.2,
    "ENCRYPTION_KEYS": ["cw_0x689RpI-jtRR7oE8h_eQsKImvJapLeSbXpwF4e4="],
    "AGENTS": {
        "scripted": "tests.agents.ScriptedAgent",
        "approval": "tests.agents.ApprovalAgent",
        "failing": "tests.agents.FailingAgent",
        "echo": "tests.agents.EchoAgent",
    },
}


@pytest.fixture(autouse=True)
def fast_timings(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> Any:
    monkeypatch.setenv("AP_TOOL_LOG", str(tmp_path / "tools.log"))
    monkeypatch.setenv("AP_CHUNK_DELAY", "0.005")
    with override_settings(AGENT_PERSISTENCE=FAST):
        yield


def tool_runs(tmp_path: Any) -> list[str]:
    log = tmp_path / "tools.log"
    return log.read_text().splitlines() if log.exists() else []


def run(coro: Any) -> Any:
    """Run ``coro`` on a new event loop, then close the connection of the thread that served its queries."""

    async def main() -> Any:
        try:
            return await coro
        finally:
            await sync_to_async(connections.close_all)()

    return asyncio.run(main())


def assistant_messages(conversation_id: uuid.UUID) -> list[Message]:
    return list(Message.objects.filter(conversation_id=conversation_id, role="assistant").order_by("position"))


def test_a_turn_stores_the_user_message_the_answer_and_its_outcome(alice: Any, tmp_path: Any) -> None:
    conversation_id = uuid.uuid4()
    updates: list[dict[str, Any]] = []

    def receiver(**kwargs: Any) -> None:
        updates.append(kwargs)

    conversation_updated.connect(receiver)
    try:

        async def scenario() -> Any:
            handle = await start_turn(alice, conversation_id, content="hello", agent="scripted")
            return handle, await handle.task

        handle, outcome = run(scenario())
    finally:
        conversation_updated.disconnect(receiver)
    assert outcome is Outcome.COMPLETED
    messages = list(Message.objects.filter(conversation_id=conversation_id).order_by("position"))
    assert [m.role for m in messages] == ["user", "assistant"]
    assert messages[0].content == "hello"
    assert messages[1].id == handle.message_id
    assert messages[1].content == ANSWER
    assert messages[1].tool_calls[0]["result"] == {"answer": "result of q1"}
    assert Run.objects.get(pk=handle.run_id).status == "completed"
    assert TurnSupervision.objects.get(conversation_id=conversation_id).status == "done"
    assert Conversation.objects.get(pk=conversation_id).last_turn_status == "complete"
    assert list(Event.objects.filter(conversation_id=conversation_id).values_list("type", flat=True)) == [
        "status_running",
        "status_idle",
    ]
    assert tool_runs(tmp_path) == ["start q1", "done q1"]
    assert [u["conversation_id"] for u in updates] == [conversation_id]
    assert updates[0]["message_id"] == handle.message_id


def test_the_agent_sees_the_stored_transcript(alice: Any) -> None:
    conversation_id = uuid.uuid4()

    async def scenario() -> None:
        for content in ("first", "second"):
            handle = await start_turn(alice, conversation_id, content=content, agent="echo")
            await handle.task

    run(scenario())
    answers = [m.content for m in assistant_messages(conversation_id)]
    assert answers == ["user:first", "user:first | assistant:user:first | user:second"]


def test_a_second_turn_while_one_runs_is_busy_and_writes_nothing(alice: Any) -> None:
    conversation_id = uuid.uuid4()

    async def scenario() -> Any:
        handle = await start_turn(alice, conversation_id, content="one", agent="scripted")
        await asyncio.sleep(0.05)
        with pytest.raises(Busy) as refused:
            await start_turn(alice, conversation_id, content="two", agent="scripted")
        await handle.task
        return handle, refused.value

    handle, error = run(scenario())
    assert error.details["occupant"]["message_id"] == str(handle.message_id)
    assert list(Message.objects.filter(conversation_id=conversation_id, role="user").values_list("content", flat=True)) == ["one"]
    assert Run.objects.filter(conversation_id=conversation_id).count() == 1


def test_an_unknown_agent_is_refused_before_anything_is_written(alice: Any) -> None:
    conversation_id = uuid.uuid4()
    with pytest.raises(Validation):
        run(start_turn(alice, conversation_id, content="x", agent="nope"))
    assert not Conversation.objects.filter(pk=conversation_id).exists()


def test_another_user_cannot_start_a_turn_in_alices_conversation(alice: Any, mallory: Any) -> None:
    conversation_id = uuid.uuid4()

    async def scenario() -> None:
        await (await start_turn(alice, conversation_id, content="mine", agent="echo")).task
        await start_turn(mallory, conversation_id, content="theirs", agent="echo")

    with pytest.raises(NotFound):
        run(scenario())
    assert Message.objects.filter(conversation_id=conversation_id).count() == 2


def test_an_approval_suspends_the_turn_until_answered_and_the_tool_runs_once(alice: Any, tmp_path: Any) -> None:
    conversation_id = uuid.uuid4()

    async def scenario() -> Any:
        first = await start_turn(alice, conversation_id, content="do it", agent="approval")
        assert await first.task is Outcome.INTERRUPTED
        with pytest.raises(PendingInterrupts):
            await start_turn(alice, conversation_id, content="again", agent="approval")
        pending = await sync_to_async(list)(Interrupt.objects.filter(conversation_id=conversation_id, status="pending"))
        assert len(pending) == 1 and pending[0].kind == "tool_approval"
        answer = [{"id": str(pending[0].pk), "response": {"approved": True}}]
        resolved, second = await continue_turn(alice, conversation_id, answer)
        assert second is not None and second.message_id == first.message_id
        assert await second.task is Outcome.COMPLETED
        again, third = await continue_turn(alice, conversation_id, answer)
        assert third is None and again[0].response == {"approved": True}
        return first

    first = run(scenario())
    answers = assistant_messages(conversation_id)
    assert [m.content for m in answers] == [ANSWER]
    assert answers[0].id == first.message_id
    assert tool_runs(tmp_path) == ["start q1", "done q1"]
    statuses = sorted(Run.objects.filter(conversation_id=conversation_id).values_list("status", flat=True))
    assert statuses == ["completed", "completed"]
    assert Conversation.objects.get(pk=conversation_id).last_turn_status == "complete"


def test_a_denied_tool_does_not_run_and_the_turn_goes_on(alice: Any, tmp_path: Any) -> None:
    conversation_id = uuid.uuid4()

    async def scenario() -> None:
        first = await start_turn(alice, conversation_id, content="do it", agent="approval")
        await first.task
        pending = await sync_to_async(Interrupt.objects.get)(conversation_id=conversation_id)
        _, second = await continue_turn(alice, conversation_id, [{"id": str(pending.pk), "response": {"approved": False}}])
        await second.task

    run(scenario())
    (answer,) = assistant_messages(conversation_id)
    assert answer.content == ANSWER
    assert answer.tool_calls[0]["result"]["denied"] is True
    assert tool_runs(tmp_path) == []


def test_a_stop_ends_the_turn_as_cancelled_and_keeps_the_partial_answer(alice: Any) -> None:
    conversation_id = uuid.uuid4()

    async def scenario() -> Any:
        handle = await start_turn(alice, conversation_id, content="go", agent="scripted")
        await asyncio.sleep(0.1)
        await cancel_turn(alice, conversation_id)
        return handle, await handle.task

    handle, outcome = run(scenario())
    assert outcome is Outcome.CANCELLED
    (answer,) = assistant_messages(conversation_id)
    assert answer.content and ANSWER.startswith(answer.content) and answer.content != ANSWER
    assert answer.metadata["stop_reason"] == "cancelled"
    assert Run.objects.get(pk=handle.run_id).status == "aborted"
    assert Conversation.objects.get(pk=conversation_id).last_turn_status == "cancelled"


def test_a_stop_requested_from_another_process_is_seen_within_a_heartbeat(alice: Any) -> None:
    conversation_id = uuid.uuid4()

    async def scenario() -> Any:
        handle = await start_turn(alice, conversation_id, content="go", agent="scripted")
        await asyncio.sleep(0.05)
        # What another replica does: flag the run in the database only.
        await sync_to_async(Run.objects.filter(pk=handle.run_id).update)(cancel_requested=True)
        return await asyncio.wait_for(handle.task, timeout=2)

    assert run(scenario()) is Outcome.CANCELLED
    assert Conversation.objects.get(pk=conversation_id).last_turn_status == "cancelled"


def test_an_agent_error_ends_the_turn_as_errored_never_running(alice: Any) -> None:
    conversation_id = uuid.uuid4()

    async def scenario() -> Any:
        handle = await start_turn(alice, conversation_id, content="go", agent="failing")
        return handle, await handle.task

    handle, outcome = run(scenario())
    assert outcome is Outcome.ERRORED
    failed = Run.objects.get(pk=handle.run_id)
    assert failed.status == "failed" and failed.error["code"] == "agent_error"
    assert TurnSupervision.objects.get(conversation_id=conversation_id).status == "errored"
    assert Conversation.objects.get(pk=conversation_id).last_turn_status == "errored"
    assert assistant_messages(conversation_id)[0].content == "partial "


def test_the_maximum_run_time_ends_the_turn_as_errored(alice: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    conversation_id = uuid.uuid4()
    monkeypatch.setenv("AP_CHUNK_DELAY", "0.05")

    async def scenario() -> Any:
        handle = await start_turn(alice, conversation_id, content="go", agent="scripted")
        return handle, await handle.task

    with override_settings(AGENT_PERSISTENCE={**FAST, "MAX_RUN_TIME": 0.3}):
        handle, outcome = run(scenario())
    assert outcome is Outcome.ERRORED
    assert Run.objects.get(pk=handle.run_id).error["code"] == "max_run_time"
    assert Conversation.objects.get(pk=conversation_id).last_turn_status == "errored"


def test_a_fenced_producer_stops_within_a_heartbeat_and_writes_nothing_more(alice: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    conversation_id = uuid.uuid4()
    monkeypatch.setenv("AP_CHUNK_DELAY", "0.02")

    async def scenario() -> Any:
        handle = await start_turn(alice, conversation_id, content="go", agent="scripted")
        await asyncio.sleep(0.1)
        # An operator (or a takeover) raises the epoch: the producer is fenced.
        assert await supervision_store().aforce_release(conversation_id)
        return handle, await asyncio.wait_for(handle.task, timeout=1.0)

    handle, outcome = run(scenario())
    assert outcome is Outcome.FENCED
    assert assistant_messages(conversation_id) == []
    assert Run.objects.get(pk=handle.run_id).status == "running"
    assert not Event.objects.filter(conversation_id=conversation_id, type="status_idle").exists()


def test_a_new_turn_over_a_dead_producer_records_the_old_run_as_lost(alice: Any) -> None:
    from datetime import timedelta

    from django.utils import timezone

    from agent_persistence.runtime.lifecycle import begin_turn

    conversation_id = uuid.uuid4()
    dead = begin_turn(alice, conversation_id, content="first", agent="echo")  # claimed, never driven
    TurnSupervision.objects.filter(pk=conversation_id).update(heartbeat_at=timezone.now() - timedelta(seconds=5))

    async def scenario() -> Any:
        handle = await start_turn(alice, conversation_id, content="second", agent="echo")
        return handle, await handle.task

    handle, outcome = run(scenario())
    assert outcome is Outcome.COMPLETED
    lost = Run.objects.get(pk=dead.run_id)
    assert lost.status == "aborted" and lost.error["code"] == "producer_lost"
    assert Event.objects.filter(conversation_id=conversation_id, type="producer_lost").count() == 1
    assert TurnSupervision.objects.get(pk=conversation_id).epoch == 2
