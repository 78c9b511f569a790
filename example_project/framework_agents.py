"""One agent per framework bridge, as in the how-to guides, with no network and no API key.

Each answers an order question: it asks for the ``refund`` (or ``lookup``)
tool, which needs a person's approval, then answers with the tool's result.
The models are each framework's own test doubles (LangChain's
``GenericFakeChatModel``, Pydantic AI's ``FunctionModel``, a small OpenAI
Agents SDK ``Model``); put a real model in their place. Registered in
``settings.AGENT_PERSISTENCE["AGENTS"]`` as ``langgraph``, ``pydantic-ai`` and
``openai-agents``. Needs ``pip install agent-persistence[integrations]``.
"""

from __future__ import annotations

from typing import Any

# -- LangGraph (docs/howto/langgraph.md) -------------------------------------------------------------
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.types import Command, interrupt

from agent_persistence.integrations.langgraph import LangGraphAgent, record_tool_calls


@tool
def lookup(query: str) -> str:
    """Look an order up."""
    return f"order {query} ships tomorrow"


class OrderGraph(LangGraphAgent):
    def build_graph(self, checkpointer: Any) -> Any:
        async def agent(state: MessagesState) -> dict:
            last = state["messages"][-1]
            if isinstance(last, ToolMessage):
                model = GenericFakeChatModel(messages=iter([f"The tool says: {last.content}."]))
                return {"messages": [await model.ainvoke(state["messages"])]}
            # A real chat model decides this; the fake one only streams text.
            return {"messages": [AIMessage(content="", tool_calls=[{"name": "lookup", "args": {"query": "42"}, "id": "call-1"}])]}

        def approve(state: MessagesState) -> Command:
            call = state["messages"][-1].tool_calls[0]
            answer = interrupt({"tool": call["name"], "arguments": call["args"]})
            if isinstance(answer, dict) and answer.get("approved") is True:
                return Command(goto="tools")
            denial = ToolMessage(content="the user said no", tool_call_id=call["id"])
            return Command(goto="agent", update={"messages": [denial]})

        builder = StateGraph(MessagesState)
        builder.add_node("agent", agent)
        builder.add_node("approve", approve, destinations=("tools", "agent"))
        builder.add_node("tools", ToolNode([lookup], awrap_tool_call=record_tool_calls))
        builder.add_edge(START, "agent")
        builder.add_conditional_edges(
            "agent", lambda state: "approve" if state["messages"][-1].tool_calls else END, ["approve", END]
        )
        builder.add_edge("tools", "agent")
        return builder.compile(checkpointer=checkpointer)


# -- Pydantic AI (docs/howto/pydantic-ai.md) ---------------------------------------------------------
from pydantic_ai import Agent  # noqa: E402
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart  # noqa: E402
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel  # noqa: E402

from agent_persistence.integrations.pydantic_ai import PydanticAIAgent  # noqa: E402

REFUND_DONE = "Your refund is on its way."


def answered(messages: list[Any]) -> bool:
    return any(isinstance(part, ToolReturnPart) for message in messages for part in message.parts)


def respond(messages: list[Any], info: AgentInfo) -> ModelResponse:
    if answered(messages):
        return ModelResponse(parts=[TextPart(REFUND_DONE)])
    return ModelResponse(parts=[ToolCallPart("refund", {"order": "42"}, tool_call_id="call-1")])


async def stream(messages: list[Any], info: AgentInfo) -> Any:
    if answered(messages):
        for word in REFUND_DONE.split(" "):
            yield word + " "
    else:
        yield {0: DeltaToolCall(name="refund", json_args='{"order": "42"}', tool_call_id="call-1")}


support = Agent(FunctionModel(respond, stream_function=stream), instructions="Help with orders.")


@support.tool_plain(requires_approval=True)
def refund(order: str) -> str:
    """Refund an order."""
    return f"order {order} refunded"


class SupportAgent(PydanticAIAgent):
    agent = support


# -- OpenAI Agents SDK (docs/howto/openai-agents.md) --------------------------------------------------
from agents import Agent as SDKAgent  # noqa: E402
from agents import RunConfig, function_tool  # noqa: E402
from agents.items import ModelResponse as SDKModelResponse  # noqa: E402
from agents.models.interface import Model  # noqa: E402
from agents.testing import assistant_message, function_call  # noqa: E402
from agents.usage import Usage  # noqa: E402
from openai.types.responses import Response, ResponseCompletedEvent, ResponseTextDeltaEvent  # noqa: E402

from agent_persistence.integrations.openai_agents import OpenAIAgentsAgent  # noqa: E402


class TwoStepModel(Model):
    """Asks for the refund first; answers once the tool's output is in the input."""

    def _output(self, input: Any) -> tuple[str, list[Any]]:
        done = any(isinstance(item, dict) and item.get("type") == "function_call_output" for item in input)
        if done:
            return REFUND_DONE, [assistant_message(REFUND_DONE)]
        return "", [function_call("refund", {"order": "42"}, call_id="call-1")]

    async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any) -> SDKModelResponse:
        _, output = self._output(input)
        return SDKModelResponse(output=output, usage=Usage(requests=1), response_id="r")

    async def stream_response(self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any) -> Any:
        text, output = self._output(input)
        for number, word in enumerate(text.split(" ") if text else []):
            yield ResponseTextDeltaEvent(type="response.output_text.delta", item_id="m", output_index=0,
                                         content_index=0, delta=word + " ", logprobs=[], sequence_number=number)
        yield ResponseCompletedEvent(type="response.completed", sequence_number=99, response=Response(
            id="r", created_at=0, model="two-step", object="response", output=output, tool_choice="auto",
            tools=[], parallel_tool_calls=False, status="completed"))


@function_tool(name_override="refund", needs_approval=True)
def refund_order(order: str) -> str:
    """Refund an order."""
    return f"order {order} refunded"


class SupportSDKAgent(OpenAIAgentsAgent):
    agent = SDKAgent(name="support", instructions="Help with orders.", model=TwoStepModel(), tools=[refund_order])
    run_config = RunConfig(tracing_disabled=True)
