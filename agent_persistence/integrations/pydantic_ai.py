"""Run a Pydantic AI ``Agent`` as a durable turn: ``PydanticAIAgent``.

Install with ``pip install agent-persistence[pydantic-ai-slim]``. Subclass and
name the agent::

    support = pydantic_ai.Agent("openai:gpt-4.1", instructions="...")

    class SupportAgent(PydanticAIAgent):
        agent = support

What the bridge does in each run of the turn:

- Message history comes from the stored transcript (every message before this
  turn's user message), the prompt from the user message. The transcript keeps
  no system prompt, so the agent's ``system_prompt`` is re-injected at the head
  of the history on every turn (Pydantic AI's ``ReinjectSystemPrompt``, as it
  documents for histories loaded from storage); ``instructions`` are sent on
  every request by Pydantic AI itself.
- The agent runs with ``Agent.iter``; each model request is streamed into the
  answer (text deltas, keyed by the request's position in the turn) and its
  completed response is recorded in ``turn.state``. A re-driven run (after a
  crash or an answered interrupt) replays the recorded responses instead of
  asking the model again, so tool-call ids stay the same and no completed
  request is paid for twice; a request cut off by a crash is made again and
  only the text past what the answer already holds is streamed.
- Every tool call goes through ``turn.tool`` (a capability's
  ``wrap_tool_execute``): recorded on the message, checkpointed, never run
  twice.
- Deferred tools become interrupts of the turn: a tool that requires approval
  a ``tool_approval`` interrupt (key ``tool:<tool_call_id>``, answer
  ``{"approved": true}`` or anything else for a denial), an external call a
  ``client_tool`` interrupt whose answer is the tool's result. The answers go
  back as ``DeferredToolResults``.
- Each real model request adds its token counts to the run's usage.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic_ai import Agent as PydanticAgent
from pydantic_ai.capabilities import AbstractCapability, ReinjectSystemPrompt
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import Model, infer_model
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults, ToolDenied
from pydantic_core import to_jsonable_python

from ..models import InterruptKind
from ..runtime.agents import Agent
from ..runtime.outcomes import CANCELLED_ANSWER, InterruptCancelled, TurnSuspended
from .base import DurableText, ModelCallLog, add_usage, bridge_state

if TYPE_CHECKING:
    from ..models import Message
    from ..runtime.turn import Turn


def dump_response(response: ModelResponse) -> Any:
    return ModelMessagesTypeAdapter.dump_python([response], mode="json")[0]


def load_response(data: Any) -> ModelResponse:
    (response,) = ModelMessagesTypeAdapter.validate_python([data])
    return response  # type: ignore[return-value]


def usage_of(response: ModelResponse) -> dict[str, Any]:
    usage = response.usage
    return {
        "requests": 1,
        "input_tokens": getattr(usage, "input_tokens", 0) or 0,
        "output_tokens": getattr(usage, "output_tokens", 0) or 0,
    }


def history_from_transcript(transcript: list["Message"]) -> list[ModelMessage]:
    """Pydantic AI messages for a stored transcript: user prompts, answers, and the answers' tool calls."""
    history: list[ModelMessage] = []
    for message in transcript:
        content = message.content if isinstance(message.content, str) else json.dumps(message.content)
        if message.role == "user":
            history.append(ModelRequest(parts=[UserPromptPart(content=content)]))
        elif message.role == "assistant":
            calls = [call for call in (message.tool_calls or []) if isinstance(call, dict) and call.get("id")]
            if calls:
                history.append(ModelResponse(parts=[
                    ToolCallPart(tool_name=call.get("name", ""), args=call.get("arguments") or {}, tool_call_id=call["id"])
                    for call in calls
                ]))
                history.append(ModelRequest(parts=[
                    ToolReturnPart(tool_name=call.get("name", ""), content=call.get("result"), tool_call_id=call["id"])
                    for call in calls
                ]))
            if content:
                history.append(ModelResponse(parts=[TextPart(content=content)]))
    return history


class ReplayingModel(WrapperModel):
    """The agent's model, answering the requests the turn already completed from their records."""

    def __init__(self, wrapped: Model, turn: "Turn", log: ModelCallLog) -> None:
        super().__init__(wrapped)
        self.turn = turn
        self.log = log

    async def request(self, messages: Any, model_settings: Any, model_request_parameters: Any) -> ModelResponse:
        recorded = self.log.next_recorded()
        if recorded is not None:
            self.log.advance()
            return load_response(recorded)
        response = await self.wrapped.request(messages, model_settings, model_request_parameters)
        self.log.record(dump_response(response))
        await add_usage(self.turn, usage_of(response))
        return response

    @asynccontextmanager
    async def request_stream(self, messages: Any, model_settings: Any, model_request_parameters: Any,
                             run_context: Any = None) -> AsyncIterator[Any]:
        async with self.wrapped.request_stream(messages, model_settings, model_request_parameters, run_context) as stream:
            yield stream
        response = stream.get()
        self.log.record(dump_response(response))
        await add_usage(self.turn, usage_of(response))


@dataclass
class TurnTools(AbstractCapability[Any]):
    """Every tool call of the run through ``turn.tool``: at most once per tool-call id for the whole turn."""

    turn: Any = None

    async def wrap_tool_execute(self, ctx: Any, *, call: ToolCallPart, tool_def: Any, args: Any, handler: Any) -> Any:
        async def execute(**_arguments: Any) -> Any:
            return to_jsonable_python(await handler(args), fallback=repr)

        return await self.turn.tool(call.tool_call_id, call.tool_name, to_jsonable_python(call.args_as_dict()), execute)


class PydanticAIAgent(Agent):
    """Runs :attr:`agent` (a ``pydantic_ai.Agent``) for each turn; see the module docstring."""

    #: The Pydantic AI agent to run; or override :meth:`get_agent`.
    agent: PydanticAgent[Any, Any] | None = None

    def get_agent(self, turn: "Turn") -> PydanticAgent[Any, Any]:
        if self.agent is None:
            raise NotImplementedError("PydanticAIAgent subclasses set `agent` or override get_agent(turn).")
        return self.agent

    def get_deps(self, turn: "Turn") -> Any:
        """The ``deps`` of the run (None by default)."""
        return None

    def prompt(self, turn: "Turn") -> str:
        user = turn.user_message
        if user is None:
            return ""
        return user.content if isinstance(user.content, str) else json.dumps(user.content)

    def history(self, turn: "Turn") -> list[ModelMessage]:
        """The message history of the run: the transcript before this turn's user message."""
        return history_from_transcript(turn.transcript[:-1] if turn.user_message is not None else turn.transcript)

    async def answers(self, turn: "Turn", requests: DeferredToolRequests) -> DeferredToolResults:
        """Ask every deferred call as an interrupt of the turn; raise TurnSuspended while any is open."""
        results = DeferredToolResults()
        suspended: TurnSuspended | None = None
        asked = [(call, InterruptKind.TOOL_APPROVAL) for call in requests.approvals]
        asked += [(call, InterruptKind.CLIENT_TOOL) for call in requests.calls]
        for call, kind in asked:
            arguments = to_jsonable_python(call.args_as_dict())
            payload = {"tool_call_id": call.tool_call_id, "name": call.tool_name, "arguments": arguments}
            try:
                answer = await turn.interrupt(f"tool:{call.tool_call_id}", kind=kind, payload=payload)
            except InterruptCancelled:
                answer = dict(CANCELLED_ANSWER)
            except TurnSuspended as exc:
                suspended = suspended or exc
                continue
            if kind == InterruptKind.CLIENT_TOOL:
                results.calls[call.tool_call_id] = answer
            elif isinstance(answer, dict) and answer.get("approved") is True:
                results.approvals[call.tool_call_id] = True
            else:
                reason = answer.get("reason") if isinstance(answer, dict) else None
                results.approvals[call.tool_call_id] = ToolDenied(reason or "The tool call was denied.")
                denial = {"denied": True, "reason": reason}
                await turn.tool(call.tool_call_id, call.tool_name, arguments, lambda **_: denial)
        if suspended is not None:
            raise suspended
        return results

    async def run(self, turn: "Turn") -> None:
        agent = self.get_agent(turn)
        state = bridge_state(turn, "pydantic_ai")
        text = DurableText(turn, state)
        log = ModelCallLog(state)
        model = ReplayingModel(infer_model(agent.model), turn, log)  # type: ignore[arg-type]
        tools = TurnTools(turn=turn)
        # id=None: never takes the slot of a ReinjectSystemPrompt the host put on its own agent (that one then
        # finds the prompt present and leaves it; without one, the history of turn 2 on had no system prompt).
        reinject = ReinjectSystemPrompt(id=None)
        output_type = [agent.output_type, DeferredToolRequests]
        prompt: str | None = self.prompt(turn)
        history = self.history(turn)
        deferred: DeferredToolResults | None = None
        while True:
            async with agent.iter(
                prompt, message_history=history, deferred_tool_results=deferred, model=model,
                output_type=output_type, deps=self.get_deps(turn), capabilities=[reinject, tools],
            ) as agent_run:
                async for node in agent_run:
                    if PydanticAgent.is_model_request_node(node) and log.next_recorded() is None:
                        key = f"request:{log.step()}"
                        async with node.stream(agent_run.ctx) as events:
                            async for event in events:
                                if isinstance(event, PartStartEvent) and isinstance(event.part, TextPart):
                                    text.feed(key, event.part.content)
                                elif isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta):
                                    text.feed(key, event.delta.content_delta)
                output = agent_run.result.output if agent_run.result is not None else None
                messages = agent_run.all_messages()
            if not isinstance(output, DeferredToolRequests):
                return
            deferred = await self.answers(turn, output)
            prompt, history = None, messages
