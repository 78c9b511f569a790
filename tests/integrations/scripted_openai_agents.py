"""An OpenAI Agents SDK agent on a Model written here, following tests/integrations/script.py."""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator

from agents import Agent as SDKAgent
from agents import RunConfig, function_tool
from agents.items import ModelResponse as SDKModelResponse
from agents.models.interface import Model as SDKModel
from agents.testing import assistant_message, function_call
from agents.usage import Usage
from openai.types.responses import Response, ResponseCompletedEvent, ResponseTextDeltaEvent, ResponseUsage
from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails
from pydantic_core import to_jsonable_python

from agent_persistence.integrations.openai_agents import OpenAIAgentsAgent
from tests.integrations.script import PART1, PART2, TOOL_ARGUMENTS, chunk_delay, log_model_call, lookup_query, tokens


class ScriptedResponsesModel(SDKModel):
    """Answers from the input it is given: text and a lookup call first, the rest once the tool's output is in."""

    @staticmethod
    def _answered(input: Any) -> bool:
        items = to_jsonable_python(input) if isinstance(input, list) else []
        return any(isinstance(item, dict) and item.get("type") == "function_call_output" for item in items)

    @staticmethod
    def _response(answered: bool) -> Response:
        text = PART2 if answered else PART1
        output = [assistant_message(text)]
        if not answered:
            output.append(function_call("lookup", TOOL_ARGUMENTS, call_id="call-1"))
        usage = ResponseUsage(
            input_tokens=100, output_tokens=len(tokens(text)), total_tokens=100 + len(tokens(text)),
            input_tokens_details=InputTokensDetails(cached_tokens=0, cache_write_tokens=0), output_tokens_details=OutputTokensDetails(reasoning_tokens=0),
        )
        return Response(
            id="scripted", created_at=0, model="scripted", object="response", output=output, tool_choice="auto",
            tools=[], parallel_tool_calls=False, status="completed", usage=usage,
        )

    async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any) -> SDKModelResponse:
        answered = self._answered(input)
        log_model_call(f"openai-agents {'answer' if answered else 'tool'}")
        response = self._response(answered)
        return SDKModelResponse(output=response.output, usage=Usage(requests=1), response_id=response.id)

    async def stream_response(self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        answered = self._answered(input)
        log_model_call(f"openai-agents {'answer' if answered else 'tool'}")
        sequence = 0
        for token in tokens(PART2 if answered else PART1):
            await asyncio.sleep(chunk_delay())
            yield ResponseTextDeltaEvent(
                type="response.output_text.delta", item_id="scripted-message", output_index=0, content_index=0,
                delta=token, logprobs=[], sequence_number=sequence,
            )
            sequence += 1
        yield ResponseCompletedEvent(type="response.completed", response=self._response(answered), sequence_number=sequence)


def sdk_agent(approval: bool) -> SDKAgent:
    @function_tool(name_override="lookup", needs_approval=approval)
    async def lookup_tool_sdk(query: str) -> dict:
        """Look something up."""
        return await lookup_query(query)

    return SDKAgent(name="scripted", instructions="Answer.", model=ScriptedResponsesModel(), tools=[lookup_tool_sdk])


class ScriptedOpenAIAgent(OpenAIAgentsAgent):
    agent = sdk_agent(approval=False)
    run_config = RunConfig(tracing_disabled=True)


class ApprovalOpenAIAgent(ScriptedOpenAIAgent):
    agent = sdk_agent(approval=True)
