"""Reconstruct-for-reload against its contract: on the ORM family (the configured database) and the in-memory one."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connections
from django.test import override_settings

from agent_persistence.runtime.agents import Agent
from agent_persistence.runtime.producer import Outcome
from agent_persistence.runtime.turn import Turn
from agent_persistence.runtime.lifecycle import start_turn
from agent_persistence.scope import Scope
from agent_persistence.stores import interrupt_store, run_store
from agent_persistence.stores.memory import reset_memory_stores
from agent_persistence.stores.reconstruct import reconstruct
from agent_persistence.testing.family import Stores, memory_stores
from agent_persistence.testing.reconstruct import ReconstructContract


class TestReconstruct(ReconstructContract):
    pass


class TestMemoryReconstruct(ReconstructContract):
    def make_stores(self) -> Stores:
        return memory_stores()

    @pytest.fixture(autouse=True)
    def no_database(self, stores: Any, django_db_blocker: Any) -> Any:
        with django_db_blocker.block():
            yield


# -- a subagent parked on its own question, produced by the real runtime ----------------------------------------

RUNTIME = {
    "HEARTBEAT_INTERVAL": 0.1, "DEAD_AFTER": 0.6, "RECORDING_FLUSH_INTERVAL": 0.05, "CHECKPOINT_INTERVAL": 0.2,
    "AGENTS": {"asking_scout": "tests.test_reconstruct.AskingScoutAgent"},
}


class AskingScoutAgent(Agent):
    """Streams, then its "scout" subagent streams and asks its own question: the turn parks on the child."""

    async def run(self, turn: Turn) -> None:
        turn.stream("Let me look. ")
        async with turn.subagent("scout") as scout:
            scout.message("user", "find the venue")
            scout.stream("looking ")
            await scout.interrupt("where", payload={"question": "Where?"})
        turn.stream("Done.")


@pytest.fixture(params=[pytest.param("orm", marks=pytest.mark.django_db(transaction=True)), "memory"])
def runtime_family(request: pytest.FixtureRequest) -> Any:
    if request.param == "orm":
        with override_settings(AGENT_PERSISTENCE=RUNTIME):
            yield request.param
        return
    reset_memory_stores()
    with override_settings(AGENT_PERSISTENCE={**RUNTIME, "STORES": "agent_persistence.stores.memory.family"}):
        reset_memory_stores()
        yield request.param
    reset_memory_stores()


def test_a_subagent_parked_on_its_own_question_has_its_card(runtime_family: Any, alice: Scope) -> None:
    """While the child waits on its interrupt, the reload shows its card (interrupted, with its transcript)."""
    conversation_id = uuid.uuid4()

    async def scenario() -> Any:
        try:
            handle = await start_turn(alice, conversation_id, content="find me a venue", agent="asking_scout")
            assert await handle.task is Outcome.INTERRUPTED
            return handle
        finally:
            await sync_to_async(connections.close_all)()

    handle = asyncio.run(scenario())
    (child,) = run_store().children(alice, handle.run_id)
    (pending,) = interrupt_store().pending(alice, run_id=child.pk)
    rebuilt = reconstruct(alice, conversation_id)
    assert [interrupt.pk for interrupt in rebuilt.interrupts] == [pending.pk]
    (card,) = rebuilt.subagents
    assert (card.run.pk, card.run.name, card.run.status, card.run.message_id) == (
        child.pk, "scout", "interrupted", handle.message_id)
    assert card.messages == [{"role": "user", "content": "find the venue"}, {"role": "assistant", "content": "looking "}]
    assert [message.content for message in rebuilt.messages.items] == ["find me a venue"]  # the answer is not written
    # The parked turn belongs to the newest page only: a page before a cursor has no card of it.
    (question,) = rebuilt.messages.items
    assert reconstruct(alice, conversation_id, before=question.id).subagents == []
    assert [c.run.pk for c in reconstruct(alice, conversation_id, limit=1).subagents] == [child.pk]
