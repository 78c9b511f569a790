"""Pydantic AI bridge: the agent's ``system_prompt`` reaches the model on every durable turn, not the first only.

Pydantic AI's own ``test_run_with_history_new`` scenario (an agent with
``system_prompt="Foobar"`` and a ``ret_a`` tool, run twice, the second time on
the first run's history) as two durable turns of one conversation, through the
real runtime on the real database. The history of turn 2 is rebuilt from the
stored transcript, which has no system prompt: the bridge re-injects it
(``ReinjectSystemPrompt``), as Pydantic AI documents for histories loaded from
storage.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any, AsyncIterator

import pytest
from asgiref.sync import sync_to_async
from django.db import connections
from django.test import override_settings
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai.capabilities import ReinjectSystemPrompt
from pydantic_ai.messages import ModelRequest, ModelResponse, SystemPromptPart, TextPart, ToolCallPart, ToolReturnPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel

from agent_persistence.integrations.pydantic_ai import PydanticAIAgent
from agent_persistence.runtime.producer import Outcome
from agent_persistence.runtime.lifecycle import start_turn
from tests.integrations.settings import AGENT_PERSISTENCE as BRIDGE_SETTINGS

pytestmark = pytest.mark.django_db(transaction=True)

#: Every request the model was shown, in order (the parts of each message, as (kind, content) pairs).
SEEN: list[list[list[tuple[str, Any]]]] = []


def shown(messages: list[Any]) -> list[list[tuple[str, Any]]]:
    return [[(type(part).__name__, getattr(part, "content", None)) for part in message.parts] for message in messages]


def answered(messages: list[Any]) -> str | None:
    last = messages[-1]
    returned = [part for part in last.parts if isinstance(part, ToolReturnPart)] if isinstance(last, ModelRequest) else []
    return json.dumps({"ret_a": returned[0].content}, separators=(",", ":")) if returned else None


def respond(messages: list[Any], info: AgentInfo) -> ModelResponse:
    SEEN.append(shown(messages))
    text = answered(messages)
    if text is not None:
        return ModelResponse(parts=[TextPart(content=text)])
    return ModelResponse(parts=[ToolCallPart(tool_name="ret_a", args={"x": "a"}, tool_call_id="call-a")])


async def stream(messages: list[Any], info: AgentInfo) -> AsyncIterator[Any]:
    SEEN.append(shown(messages))
    text = answered(messages)
    if text is not None:
        yield text
    else:
        yield {0: DeltaToolCall(name="ret_a", json_args=json.dumps({"x": "a"}), tool_call_id="call-a")}


async def ret_a(x: str) -> str:
    return f"{x}-apple"


foobar = PydanticAgent(FunctionModel(respond, stream_function=stream), system_prompt="Foobar", tools=[ret_a])
#: The same, with the host's own ReinjectSystemPrompt on the agent: the bridge's must not clash with it.
reinjecting = PydanticAgent(FunctionModel(respond, stream_function=stream), system_prompt="Foobar", tools=[ret_a],
                            capabilities=[ReinjectSystemPrompt()])


class FoobarAgent(PydanticAIAgent):
    agent = foobar


class ReinjectingFoobarAgent(PydanticAIAgent):
    agent = reinjecting


@pytest.fixture(autouse=True)
def foobar_registered() -> Any:
    SEEN.clear()
    here = "tests.integrations.test_pydantic_ai_system_prompt"
    agents = {**BRIDGE_SETTINGS["AGENTS"], "foobar": f"{here}.FoobarAgent", "reinjecting": f"{here}.ReinjectingFoobarAgent"}
    with override_settings(AGENT_PERSISTENCE={**BRIDGE_SETTINGS, "AGENTS": agents, "HEARTBEAT_INTERVAL": 0.1,
                                              "RECORDING_FLUSH_INTERVAL": 0.05, "CHECKPOINT_INTERVAL": 0.2}):
        yield


def run(coro: Any) -> Any:
    async def main() -> Any:
        try:
            return await coro
        finally:
            await sync_to_async(connections.close_all)()

    return asyncio.run(main())


@pytest.mark.parametrize("agent", ["foobar", "reinjecting"])
def test_the_system_prompt_reaches_the_model_on_every_turn(agent: str, alice: Any) -> None:
    conversation_id = uuid.uuid4()

    async def scenario() -> None:
        for content in ("Hello", "Hello again"):
            handle = await start_turn(alice, conversation_id, content=content, agent=agent)
            assert await handle.task is Outcome.COMPLETED

    run(scenario())
    system, user = SystemPromptPart.__name__, UserPromptPart.__name__
    # Turn 1: a fresh run, the agent's own system prompt heads the first request (twice: the tool call, the answer).
    assert SEEN[0] == [[(system, "Foobar"), (user, "Hello")]]
    assert SEEN[1][0] == [(system, "Foobar"), (user, "Hello")]
    # Turn 2: the history comes from the stored transcript, and the system prompt still heads it, once.
    for request in SEEN[2:]:
        assert request[0][:2] == [(system, "Foobar"), (user, "Hello")]
        assert sum(kind == system for message in request for kind, _ in message) == 1
        assert [(user, "Hello again")] in request
    assert len(SEEN) == 4
