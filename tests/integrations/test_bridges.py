"""The three bridges as durable turns in one process: stream, tool call, approval, denial, stop, history.

Each framework runs its own test model (``tests/integrations/frameworks.py``)
through the real runtime (``start_turn`` / ``continue_turn`` / ``cancel_turn``)
on the real database. The crash and cross-process cases are in
``test_bridges_crash.py``.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connections
from django.test import override_settings

from agent_persistence.models import GraphCheckpoint, Interrupt, Message, Run
from agent_persistence.runtime.producer import Outcome
from agent_persistence.runtime.lifecycle import cancel_turn, continue_turn, start_turn
from tests.agents import ANSWER
from tests.integrations.script import PART1
from tests.integrations.settings import AGENT_PERSISTENCE as BRIDGE_SETTINGS

pytestmark = pytest.mark.django_db(transaction=True)

FRAMEWORKS = ["langgraph", "pydantic-ai", "openai-agents"]
FAST = {
    **BRIDGE_SETTINGS,
    "HEARTBEAT_INTERVAL": 0.1,
    "DEAD_AFTER": 0.6,
    "RECORDING_FLUSH_INTERVAL": 0.05,
    "CHECKPOINT_INTERVAL": 0.2,
}


@pytest.fixture(autouse=True)
def fast_bridges(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    monkeypatch.setenv("AP_TOOL_LOG", str(tmp_path / "tools.log"))
    monkeypatch.setenv("AP_MODEL_LOG", str(tmp_path / "model.log"))
    monkeypatch.setenv("AP_CHUNK_DELAY", "0.002")
    monkeypatch.setenv("AP_TOOL_SECONDS", "0.01")
    with override_settings(AGENT_PERSISTENCE=FAST):
        yield


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def run(coro: Any) -> Any:
    async def main() -> Any:
        try:
            return await coro
        finally:
            await sync_to_async(connections.close_all)()

    return asyncio.run(main())


def answer_of(conversation_id: uuid.UUID) -> Message:
    (message,) = Message.objects.filter(conversation_id=conversation_id, role="assistant")
    return message


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_turn_streams_the_answer_and_records_the_tool_call(framework: str, alice: Any, tmp_path: Path) -> None:
    conversation_id = uuid.uuid4()
    seen: list[str] = []

    async def scenario() -> Any:
        from agent_persistence.runtime import hooks

        def listener(update: Any) -> None:
            seen.append(update.content)

        hooks.stream_listeners.append(listener)
        try:
            handle = await start_turn(alice, conversation_id, content="hello", agent=framework)
            return await handle.task
        finally:
            hooks.stream_listeners.remove(listener)

    assert run(scenario()) is Outcome.COMPLETED
    message = answer_of(conversation_id)
    assert message.content == ANSWER
    (call,) = message.tool_calls
    assert call["id"] and call["arguments"] == {"query": "q1"}
    assert "result of q1" in str(call["result"])
    assert lines(tmp_path / "tools.log") == ["start q1", "done q1"]
    # Streamed, not delivered at the end: followers saw the answer grow.
    growing = [text for text in seen if text]
    assert len(set(growing)) > 10 and growing[-1] == ANSWER
    run_row = Run.objects.get(conversation_id=conversation_id)
    assert run_row.status == "completed"
    if framework != "langgraph":  # the model's usage, one entry per model call
        assert run_row.usage["requests"] == 2 and run_row.usage["output_tokens"] > 0


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("approved", [True, False, "cancelled"])
def test_an_approval_becomes_an_interrupt_and_its_answer_goes_back_to_the_framework(
    framework: str, approved: Any, alice: Any, tmp_path: Path
) -> None:
    """Approved, the tool runs once; denied or cancelled (a batch's cancelled entry), it never runs."""
    conversation_id = uuid.uuid4()

    async def first() -> Any:
        handle = await start_turn(alice, conversation_id, content="hello", agent=f"{framework}-approval")
        return await handle.task

    assert run(first()) is Outcome.INTERRUPTED
    (pending,) = Interrupt.objects.filter(conversation_id=conversation_id, status="pending")
    assert lines(tmp_path / "tools.log") == []
    assert "q1" in str(pending.payload)

    async def answer() -> Any:
        entry = {"status": "cancelled"} if approved == "cancelled" else {"response": {"approved": approved}}
        _, handle = await continue_turn(alice, conversation_id, [{"id": str(pending.pk), **entry}])
        return await handle.task

    assert run(answer()) is Outcome.COMPLETED
    message = answer_of(conversation_id)
    assert message.content == ANSWER
    assert lines(tmp_path / "tools.log") == (["start q1", "done q1"] if approved is True else [])


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_stop_ends_the_turn_as_cancelled_with_its_partial_answer(framework: str, alice: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AP_CHUNK_DELAY", "0.03")
    conversation_id = uuid.uuid4()

    async def scenario() -> Any:
        from agent_persistence.runtime.producer import Supervisor

        handle = await start_turn(alice, conversation_id, content="hello", agent=framework)
        producer = Supervisor.current().get(conversation_id)
        for _ in range(500):
            if len(producer.turn.text) > 10:
                break
            await asyncio.sleep(0.01)
        await cancel_turn(alice, conversation_id)
        return await handle.task

    assert run(scenario()) is Outcome.CANCELLED
    message = answer_of(conversation_id)
    assert 10 < len(message.content) < len(ANSWER)
    assert ANSWER.startswith(message.content)
    assert Run.objects.get(conversation_id=conversation_id).status == "aborted"


def test_a_second_langgraph_turn_continues_the_conversations_thread(alice: Any) -> None:
    conversation_id = uuid.uuid4()

    async def scenario() -> None:
        for content in ("first", "second"):
            handle = await start_turn(alice, conversation_id, content=content, agent="langgraph")
            assert await handle.task is Outcome.COMPLETED

    run(scenario())
    from agent_persistence.integrations.langgraph_store import DjangoCheckpointSaver

    latest = DjangoCheckpointSaver().get_tuple({"configurable": {"thread_id": str(conversation_id)}})
    contents = [getattr(m, "content", None) for m in latest.checkpoint["channel_values"]["messages"]]
    assert contents[0] == "first" and "second" in contents
    assert len([c for c in contents if c == ANSWER[len(PART1):]]) == 2  # one final reply per turn
    assert GraphCheckpoint.objects.filter(conversation_id=conversation_id).exclude(message_id=None).count() > 2
