"""A LangGraph agent on LangChain's GenericFakeChatModel, following tests/integrations/script.py."""

from __future__ import annotations

import asyncio
import json
from typing import Any, AsyncIterator

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, ToolMessage
from langchain_core.outputs import ChatGenerationChunk
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.types import Command, interrupt

from agent_persistence.integrations.langgraph import LangGraphAgent, record_tool_calls
from tests.integrations.script import PART1, PART2, TOOL_ARGUMENTS, chunk_delay, log_model_call, lookup_query, tokens


class PacedFakeChatModel(GenericFakeChatModel):
    """GenericFakeChatModel that streams word by word with a pause, tool calls included."""

    delay: float = 0.0

    async def _astream(self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> AsyncIterator[ChatGenerationChunk]:
        message = next(self.messages)
        for token in tokens(message.content):
            await asyncio.sleep(self.delay)
            chunk = ChatGenerationChunk(message=AIMessageChunk(content=token, id=message.id))
            if run_manager:
                await run_manager.on_llm_new_token(token, chunk=chunk)
            yield chunk
        if message.tool_calls:
            tool_chunks = [
                {"name": call["name"], "args": json.dumps(call["args"]), "id": call["id"], "index": index}
                for index, call in enumerate(message.tool_calls)
            ]
            yield ChatGenerationChunk(message=AIMessageChunk(content="", id=message.id, tool_call_chunks=tool_chunks))


@tool
async def lookup_tool(query: str) -> str:
    """Look something up."""
    return json.dumps(await lookup_query(query))


def scripted_reply(messages: list[Any]) -> AIMessage:
    if any(isinstance(message, ToolMessage) for message in messages):
        return AIMessage(content=PART2)
    return AIMessage(content=PART1, tool_calls=[{"name": "lookup_tool", "args": TOOL_ARGUMENTS, "id": "call-1"}])


class ScriptedGraphAgent(LangGraphAgent):
    approval = False

    def build_graph(self, checkpointer: Any) -> Any:
        async def agent(state: MessagesState) -> dict:
            reply = scripted_reply(state["messages"])
            log_model_call(f"langgraph {'tool' if reply.tool_calls else 'answer'}")
            model = PacedFakeChatModel(messages=iter([reply]), delay=chunk_delay())
            return {"messages": [await model.ainvoke(state["messages"])]}

        def route(state: MessagesState) -> str:
            if not state["messages"][-1].tool_calls:
                return END
            return "approve" if self.approval else "tools"

        def approve(state: MessagesState) -> Command:
            call = state["messages"][-1].tool_calls[0]
            answer = interrupt({"tool": call["name"], "arguments": call["args"]})
            if isinstance(answer, dict) and answer.get("approved") is True:
                return Command(goto="tools")
            denial = ToolMessage(content="denied", tool_call_id=call["id"], name=call["name"])
            return Command(goto="agent", update={"messages": [denial]})

        builder = StateGraph(MessagesState)
        builder.add_node("agent", agent)
        builder.add_node("tools", ToolNode([lookup_tool], awrap_tool_call=record_tool_calls))
        builder.add_node("approve", approve, destinations=("tools", "agent"))
        builder.add_edge(START, "agent")
        builder.add_conditional_edges("agent", route, ["tools", "approve", END])
        builder.add_edge("tools", "agent")
        return builder.compile(checkpointer=checkpointer)


class ApprovalGraphAgent(ScriptedGraphAgent):
    approval = True


