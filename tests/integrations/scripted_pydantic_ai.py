"""A Pydantic AI agent on its FunctionModel, following tests/integrations/script.py."""

from __future__ import annotations

import asyncio
import json
from typing import Any, AsyncIterator

from pydantic_ai import Agent as PydanticAgent
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel

from agent_persistence.integrations.pydantic_ai import PydanticAIAgent
from tests.integrations.script import PART1, PART2, TOOL_ARGUMENTS, chunk_delay, log_model_call, lookup_query, tokens


def _has_tool_result(messages: list[Any]) -> bool:
    return any(isinstance(part, ToolReturnPart) for message in messages for part in getattr(message, "parts", []))


async def scripted_stream(messages: list[Any], info: AgentInfo) -> AsyncIterator[Any]:
    answered = _has_tool_result(messages)
    log_model_call(f"pydantic-ai {'answer' if answered else 'tool'}")
    for token in tokens(PART2 if answered else PART1):
        await asyncio.sleep(chunk_delay())
        yield token
    if not answered:
        yield {0: DeltaToolCall(name="lookup", json_args=json.dumps(TOOL_ARGUMENTS), tool_call_id="call-1")}


def scripted_response(messages: list[Any], info: AgentInfo) -> ModelResponse:
    if _has_tool_result(messages):
        return ModelResponse(parts=[TextPart(content=PART2)])
    return ModelResponse(parts=[TextPart(content=PART1), ToolCallPart(tool_name="lookup", args=TOOL_ARGUMENTS, tool_call_id="call-1")])


def pydantic_agent(approval: bool) -> PydanticAgent:
    agent = PydanticAgent(FunctionModel(scripted_response, stream_function=scripted_stream), name="scripted")

    @agent.tool_plain(requires_approval=approval)
    async def lookup(query: str) -> dict:
        """Look something up."""
        return await lookup_query(query)

    return agent


class ScriptedPydanticAgent(PydanticAIAgent):
    agent = pydantic_agent(approval=False)


class ApprovalPydanticAgent(PydanticAIAgent):
    agent = pydantic_agent(approval=True)


