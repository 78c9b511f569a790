"""The example project's framework agents (the how-to guides' examples) run as durable turns.

Each asks for approval of its tool, gets it, runs the tool once and answers
with its result; the examples in docs/howto/ are these agents.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connections
from django.test import override_settings

from agent_persistence.models import Interrupt, Message
from agent_persistence.runtime.producer import Outcome
from agent_persistence.runtime.lifecycle import continue_turn, start_turn
from example_project.settings import AGENT_PERSISTENCE as EXAMPLE_SETTINGS

pytestmark = pytest.mark.django_db(transaction=True)

EXPECTED = {
    "langgraph": "The tool says: order 42 ships tomorrow.",
    "pydantic-ai": "Your refund is on its way. ",
    "openai-agents": "Your refund is on its way. ",
}


@pytest.mark.parametrize("agent", sorted(EXPECTED))
def test_the_example_agent_asks_approval_then_answers_with_its_tools_result(agent: str, alice: Any) -> None:
    conversation_id = uuid.uuid4()

    async def scenario() -> tuple[Outcome, Outcome]:
        try:
            first = await (await start_turn(alice, conversation_id, content="Where is order 42?", agent=agent)).task
            pending = await sync_to_async(lambda: Interrupt.objects.get(conversation_id=conversation_id, status="pending"))()
            _, handle = await continue_turn(alice, conversation_id, [{"id": str(pending.pk), "response": {"approved": True}}])
            return first, await handle.task
        finally:
            await sync_to_async(connections.close_all)()

    with override_settings(AGENT_PERSISTENCE={**EXAMPLE_SETTINGS, "CHECKPOINT_INTERVAL": 0.2}):
        first, second = asyncio.run(scenario())
    assert (first, second) == (Outcome.INTERRUPTED, Outcome.COMPLETED)
    (message,) = Message.objects.filter(conversation_id=conversation_id, role="assistant")
    assert message.content == EXPECTED[agent]
    (call,) = message.tool_calls
    assert call["arguments"] in ({"order": "42"}, {"query": "42"})
    assert "42" in str(call["result"])
