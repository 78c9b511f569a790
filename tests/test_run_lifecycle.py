"""The run lifecycle at the agent API: subagent child runs, usage kept on every ending, cancelled questions.

Real producers on a real event loop, with the agents below (registered by
import path, as a host registers its own), on each store family: the ORM one
on the configured database and the in-memory one. Every assertion reads
through the stores.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connections
from django.test import override_settings

from agent_persistence.models import Message
from agent_persistence.runtime.agents import Agent
from agent_persistence.runtime.producer import Outcome
from agent_persistence.runtime.turn import InterruptCancelled, Turn
from agent_persistence.runtime.lifecycle import cancel_turn, continue_turn, start_turn
from agent_persistence.scope import Scope
from agent_persistence.stores import conversation_store, interrupt_store, run_store
from agent_persistence.stores.memory import reset_memory_stores

FAST = {
    "HEARTBEAT_INTERVAL": 0.1,
    "DEAD_AFTER": 0.6,
    "RECORDING_FLUSH_INTERVAL": 0.05,
    "CHECKPOINT_INTERVAL": 0.2,
    "AGENTS": {
        "lead": "tests.test_run_lifecycle.LeadAgent",
        "asking_lead": "tests.test_run_lifecycle.AskingLeadAgent",
        "failing_lead": "tests.test_run_lifecycle.FailingLeadAgent",
        "spender": "tests.test_run_lifecycle.SpendingAgent",
        "questions": "tests.test_run_lifecycle.QuestionsAgent",
        "parking": "tests.test_run_lifecycle.ParkingAgent",
    },
}


async def search(query: str) -> dict[str, str]:
    return {"found": f"notes on {query}"}


class LeadAgent(Agent):
    """Streams, hands a search to a "researcher" subagent, then answers."""

    async def run(self, turn: Turn) -> None:
        turn.stream("Let me check. ")
        async with turn.subagent("researcher") as researcher:
            researcher.message("user", "find notes on lyon")
            await researcher.add_usage({"input_tokens": 30})
            found = await researcher.tool("call-s1", "search", {"query": "lyon"}, search)
            researcher.stream(f"[{found['found']}] ")
        await turn.add_usage({"input_tokens": 10})
        turn.stream("Done.")


class AskingLeadAgent(Agent):
    """Its subagent needs an approval before its tool runs."""

    async def run(self, turn: Turn) -> None:
        async with turn.subagent("researcher") as researcher:
            if not turn.state.get("briefed"):  # a re-driven run does not add it twice
                researcher.message("user", "find lyon")
                turn.state["briefed"] = True
            await researcher.add_usage({"input_tokens": 5})
            found = await researcher.tool("call-s1", "search", {"query": "lyon"}, search, approval=True)
            researcher.stream(f"{found['found']} ")
        turn.stream("Done.")


class ParkingAgent(Agent):
    """Its subagent asks a question; once answered, the turn goes on without re-entering the subagent."""

    async def run(self, turn: Turn) -> None:
        if not turn.state.get("asked"):
            turn.state["asked"] = True
            async with turn.subagent("scout") as scout:
                scout.stream("looking ")
                await scout.interrupt("where", payload={"question": "Where?"})
        turn.stream("Never mind.")


class FailingLeadAgent(Agent):
    """Its subagent fails after reporting usage; the failure ends the turn."""

    async def run(self, turn: Turn) -> None:
        await turn.add_usage({"input_tokens": 3})
        async with turn.subagent("researcher") as researcher:
            await researcher.add_usage({"input_tokens": 8})
            raise RuntimeError("the provider is down")


class SpendingAgent(Agent):
    """Reports usage, then works until it is stopped (inside a subagent)."""

    async def run(self, turn: Turn) -> None:
        await turn.add_usage({"input_tokens": 40, "output_tokens": 2})
        async with turn.subagent("worker") as worker:
            await worker.add_usage({"input_tokens": 4})
            turn.state["spent"] = True
            while True:
                worker.stream(".")
                await asyncio.sleep(0.01)


class QuestionsAgent(Agent):
    """Asks two questions at once; a cancelled one is skipped, an answered one is used."""

    async def run(self, turn: Turn) -> None:
        asked = [("city", "Which city?"), ("date", "Which date?")]
        answers: dict[str, Any] = {}
        suspended: Exception | None = None
        for key, question in asked:
            try:
                answers[key] = await turn.interrupt(key, payload={"question": question})
            except InterruptCancelled:
                answers[key] = "(skipped)"
            except Exception as exc:  # noqa: BLE001 - TurnSuspended: ask the other question too, then park
                suspended = suspended or exc
        if suspended is not None:
            raise suspended
        turn.stream(f"city={answers['city']} date={answers['date']}")


@pytest.fixture(autouse=True, params=[pytest.param("orm", marks=pytest.mark.django_db(transaction=True)), "memory"])
def family(request: pytest.FixtureRequest) -> Any:
    """Each test on the ORM family (committed transactions) and on the in-memory family (no database access)."""
    if request.param == "orm":
        with override_settings(AGENT_PERSISTENCE=FAST):
            yield request.param
        return
    reset_memory_stores()
    with override_settings(AGENT_PERSISTENCE={**FAST, "STORES": "agent_persistence.stores.memory.family"}):
        reset_memory_stores()
        yield request.param
    reset_memory_stores()


def run(coro: Any) -> Any:
    async def main() -> Any:
        try:
            return await coro
        finally:
            await sync_to_async(connections.close_all)()

    return asyncio.run(main())


def answer_of(scope: Scope, conversation_id: uuid.UUID) -> Message:
    (answer,) = [m for m in conversation_store().list_messages(scope, conversation_id).items if m.role == "assistant"]
    return answer


def top_level_runs(scope: Scope, conversation_id: uuid.UUID) -> dict[uuid.UUID, str]:
    return {run.pk: run.status for run in run_store().list(scope, conversation_id).items if run.parent_id is None}


def test_a_subagent_is_a_child_run_streaming_into_the_turns_answer(alice: Any) -> None:
    conversation_id = uuid.uuid4()

    async def scenario() -> Any:
        handle = await start_turn(alice, conversation_id, content="research lyon", agent="lead")
        assert await handle.task is Outcome.COMPLETED
        return handle

    handle = run(scenario())
    (child,) = run_store().children(alice, handle.run_id)
    assert (child.name, child.parent_id, child.message_id) == ("researcher", handle.run_id, handle.message_id)
    assert child.status == "completed" and child.usage == {"input_tokens": 30}
    assert run_store().get(alice, handle.run_id).usage == {"input_tokens": 10}
    answer = answer_of(alice, conversation_id)
    assert answer.content == "Let me check. [notes on lyon] Done."
    assert [call["id"] for call in answer.tool_calls] == ["call-s1"]
    # The child's own transcript: its brief, its tool call and result, what it streamed; not the turn's answer.
    assert child.transcript == [
        {"role": "user", "content": "find notes on lyon"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "call-s1", "name": "search", "arguments": {"query": "lyon"}}]},
        {"role": "tool", "content": {"found": "notes on lyon"}, "tool_call_id": "call-s1", "name": "search"},
        {"role": "assistant", "content": "[notes on lyon] "},
    ]
    assert [m.content for m in conversation_store().list_messages(alice, conversation_id).items] == [
        "research lyon", "Let me check. [notes on lyon] Done.",
    ]
    # The turn's newest run is still the parent: a reload's active-run and run listing see both.
    assert {run.pk for run in run_store().list(alice, conversation_id).items} == {handle.run_id, child.pk}


def test_a_subagents_question_parks_the_child_and_the_same_child_continues(alice: Any) -> None:
    conversation_id = uuid.uuid4()

    async def scenario() -> Any:
        first = await start_turn(alice, conversation_id, content="research", agent="asking_lead")
        assert await first.task is Outcome.INTERRUPTED
        (child,) = await sync_to_async(run_store().children)(alice, first.run_id)
        (pending,) = await sync_to_async(interrupt_store().pending)(alice, run_id=child.pk)
        assert (child.status, pending.run_id, pending.kind) == ("interrupted", child.pk, "tool_approval")
        assert (await sync_to_async(run_store().get)(alice, first.run_id)).status == "interrupted"
        _, second = await continue_turn(alice, conversation_id, [{"id": str(pending.pk), "response": {"approved": True}}])
        assert await second.task is Outcome.COMPLETED
        return first, second, child

    first, second, child = run(scenario())
    assert child.transcript == [{"role": "user", "content": "find lyon"}]  # written when it parked
    again = run_store().get(alice, child.pk)  # the same child run went on: interrupted -> running -> completed
    assert again.status == "completed" and again.usage == {"input_tokens": 10}
    # Continued from the checkpoint: the brief once, then the approved call, its result and the text.
    assert again.transcript == [
        {"role": "user", "content": "find lyon"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "call-s1", "name": "search", "arguments": {"query": "lyon"}}]},
        {"role": "tool", "content": {"found": "notes on lyon"}, "tool_call_id": "call-s1", "name": "search"},
        {"role": "assistant", "content": "notes on lyon "},
    ]
    assert len(run_store().list(alice, conversation_id).items) == 3  # two parent runs, one child
    assert run_store().children(alice, second.run_id) == []  # the child stays its first parent's
    assert top_level_runs(alice, conversation_id) == {first.run_id: "completed", second.run_id: "completed"}
    assert answer_of(alice, conversation_id).content.endswith("Done.")


def test_a_child_the_turn_leaves_parked_is_aborted_when_the_turn_ends(alice: Any) -> None:
    conversation_id = uuid.uuid4()

    async def scenario() -> Any:
        first = await start_turn(alice, conversation_id, content="scout", agent="parking")
        assert await first.task is Outcome.INTERRUPTED
        (pending,) = await sync_to_async(interrupt_store().pending)(alice, conversation_id)
        _, second = await continue_turn(alice, conversation_id, [{"id": str(pending.pk), "response": "here"}])
        assert await second.task is Outcome.COMPLETED
        return first

    first = run(scenario())
    (child,) = run_store().children(alice, first.run_id)
    assert (child.status, child.error["code"]) == ("aborted", "turn_ended")
    assert child.finished_at is not None and child.transcript == [{"role": "assistant", "content": "looking "}]
    assert not [r for r in run_store().list(alice, conversation_id).items if r.status in ("running", "interrupted")]
    assert answer_of(alice, conversation_id).content == "looking Never mind."


def test_a_failing_subagent_fails_its_run_and_keeps_every_runs_usage(alice: Any) -> None:
    conversation_id = uuid.uuid4()

    async def scenario() -> Any:
        handle = await start_turn(alice, conversation_id, content="go", agent="failing_lead")
        assert await handle.task is Outcome.ERRORED
        return handle

    handle = run(scenario())
    parent = run_store().get(alice, handle.run_id)
    (child,) = run_store().children(alice, handle.run_id)
    assert (parent.status, parent.usage) == ("failed", {"input_tokens": 3})
    assert (child.status, child.usage, child.error["code"]) == ("failed", {"input_tokens": 8}, "agent_error")
    assert "the provider is down" in child.error["message"]


def test_a_stopped_turn_keeps_the_usage_of_its_aborted_runs(alice: Any) -> None:
    conversation_id = uuid.uuid4()

    async def scenario() -> Any:
        handle = await start_turn(alice, conversation_id, content="go", agent="spender")
        while not [kid for kid in await sync_to_async(run_store().children)(alice, handle.run_id) if kid.usage]:
            await asyncio.sleep(0.01)
        await cancel_turn(alice, conversation_id)
        assert await handle.task is Outcome.CANCELLED
        return handle

    handle = run(scenario())
    parent = run_store().get(alice, handle.run_id)
    (child,) = run_store().children(alice, handle.run_id)
    assert (parent.status, parent.usage) == ("aborted", {"input_tokens": 40, "output_tokens": 2})
    assert (child.status, child.usage) == ("aborted", {"input_tokens": 4})
    assert parent.finished_at is not None and child.finished_at is not None


def test_a_mixed_batch_continues_the_turn_and_the_agent_sees_the_cancelled_question(alice: Any) -> None:
    conversation_id = uuid.uuid4()

    async def scenario() -> Any:
        first = await start_turn(alice, conversation_id, content="plan a trip", agent="questions")
        assert await first.task is Outcome.INTERRUPTED
        city, date = await sync_to_async(interrupt_store().pending)(alice, conversation_id)
        batch = [{"id": str(city.pk), "response": "Lyon"}, {"id": str(date.pk), "status": "cancelled"}]
        settled, second = await continue_turn(alice, conversation_id, batch)
        assert [i.status for i in settled] == ["resolved", "cancelled"]
        assert await second.task is Outcome.COMPLETED

    run(scenario())
    assert answer_of(alice, conversation_id).content == "city=Lyon date=(skipped)"
    assert {i.status for i in interrupt_store().list(alice, conversation_id)} == {"resolved", "cancelled"}
