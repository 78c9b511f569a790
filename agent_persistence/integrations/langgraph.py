"""Run a compiled LangGraph graph as a durable turn: ``LangGraphAgent``.

Install with ``pip install agent-persistence[langgraph]``. Subclass and build
the graph with the checkpointer you are given::

    class SupportGraph(LangGraphAgent):
        def build_graph(self, checkpointer):
            return builder.compile(checkpointer=checkpointer)

What the bridge does in each run of the turn:

- The graph's thread is the conversation: its checkpoints go through
  :class:`~.langgraph_store.DjangoCheckpointSaver` bound to the turn, fenced by
  the turn's epoch, each saved with the turn's own checkpoint in one
  transaction. A fresh turn sends ``graph_input(turn)`` (the user message); a
  re-driven one continues from the graph's last checkpoint, so finished nodes
  never run again.
- The graph runs with ``stream_mode="messages"``; the bridge takes the same
  chat-model token callbacks that mode is built on, inline, and streams each
  token's text into the answer under a stable key (the task's namespace and
  the model call's position in it), so a node re-run after a crash does not
  stream its text twice and a finished node's text is in the checkpoint that
  records the node as finished.
- ``interrupt(value)`` in a node becomes an interrupt of the turn (key
  ``graph:<interrupt id>``, payload ``{"value": value}``); once answered the
  graph resumes with ``Command(resume={interrupt id: answer, ...})``.
- Tool calls of a ``ToolNode`` built with ``awrap_tool_call=record_tool_calls``
  go through ``turn.tool``: recorded on the message, and never run twice.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import threading
import uuid
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import HumanMessage, ToolMessage
from langgraph.constants import TAG_NOSTREAM
from langgraph.types import Command

from ..models import InterruptKind
from ..runtime.agents import Agent
from ..runtime.outcomes import CANCELLED_ANSWER, InterruptCancelled, TurnSuspended
from .base import DurableText, bridge_state
from .langgraph_store import DjangoCheckpointSaver

if TYPE_CHECKING:
    from ..runtime.turn import Turn

#: The turn a graph runs for, seen by :func:`record_tool_calls` inside the graph's tasks.
current_turn: contextvars.ContextVar["Turn | None"] = contextvars.ContextVar("agent_persistence_turn", default=None)


def _message_text(message: Any) -> str:
    text = getattr(message, "text", "")
    if isinstance(text, str):  # langchain-core 1.x: a str property
        return str(text)
    return str(text()) if callable(text) else str(text)


def _jsonable(value: Any) -> Any:
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError):
        return repr(value)


class TurnTokenStream(BaseCallbackHandler):
    """Chat-model tokens of the graph's tasks into the turn's answer, exactly once per task.

    Runs inline (as LangGraph's own ``messages`` handler does), so a token is in
    ``turn.text`` before the node that produced it returns; a call made from a
    worker thread (a sync node) is handed to the event loop in order.
    """

    run_inline = True

    def __init__(self, text: DurableText) -> None:
        self.text = text
        self.loop = asyncio.get_running_loop()
        self.loop_thread = threading.get_ident()
        self.keys: dict[uuid.UUID, str] = {}
        self.calls: dict[str, int] = {}

    def _feed(self, key: str, text: str) -> None:
        if threading.get_ident() == self.loop_thread:
            self.text.feed(key, text)
        else:
            self.loop.call_soon_threadsafe(self.text.feed, key, text)

    def on_chat_model_start(self, serialized: Any, messages: Any, *, run_id: uuid.UUID, tags: list[str] | None = None,
                            metadata: dict[str, Any] | None = None, **kwargs: Any) -> None:
        namespace = (metadata or {}).get("langgraph_checkpoint_ns")
        if namespace is None or TAG_NOSTREAM in (tags or []):
            return
        # Task ids are derived from the checkpoint, so a task re-run after a crash has the same
        # namespace and makes its model calls in the same order: the key is stable.
        ordinal = self.calls.get(namespace, 0)
        self.calls[namespace] = ordinal + 1
        self.keys[run_id] = f"{namespace}#{ordinal}"

    def on_llm_new_token(self, token: str, *, chunk: Any = None, run_id: uuid.UUID, **kwargs: Any) -> None:
        key = self.keys.get(run_id)
        if key is not None:
            message = getattr(chunk, "message", None)
            self._feed(key, _message_text(message) if message is not None else token)

    def on_llm_end(self, response: Any, *, run_id: uuid.UUID, **kwargs: Any) -> None:
        key = self.keys.pop(run_id, None)
        if key is None or self.text.seen(key):
            return
        # A model that did not stream: its whole text at once.
        for generations in response.generations:
            for generation in generations:
                message = getattr(generation, "message", None)
                self._feed(key, _message_text(message) if message is not None else generation.text)


async def record_tool_calls(request: Any, execute: Callable[[Any], Awaitable[Any]]) -> Any:
    """``ToolNode(..., awrap_tool_call=record_tool_calls)``: each tool call through ``turn.tool``.

    The call runs at most once per tool-call id for the whole turn and is
    recorded on the assistant message; outside a turn it just runs.
    """
    turn = current_turn.get()
    call = request.tool_call
    if turn is None or not call.get("id"):
        return await execute(request)
    returned: dict[str, Any] = {}

    async def run(**_arguments: Any) -> Any:
        result = await execute(request)
        returned["value"] = result
        if isinstance(result, ToolMessage):
            return {"content": _jsonable(result.content), "status": result.status}
        return {"content": repr(result), "status": "success"}

    recorded = await turn.tool(call["id"], call["name"], _jsonable(call.get("args") or {}), run)
    if "value" in returned:
        return returned["value"]
    return ToolMessage(content=recorded["content"], tool_call_id=call["id"], name=call["name"], status=recorded["status"])


class LangGraphAgent(Agent):
    """Runs the graph of :meth:`build_graph` for each turn; see the module docstring."""

    #: The kind of the turn's interrupt for a graph's ``interrupt()``.
    interrupt_kind: str = InterruptKind.GENERIC
    #: The most supersteps one run of the graph may take.
    recursion_limit: int = 50

    def build_graph(self, checkpointer: DjangoCheckpointSaver) -> Any:
        """Return the compiled graph, compiled with ``checkpointer``."""
        raise NotImplementedError("LangGraphAgent subclasses implement build_graph(checkpointer).")

    def graph_input(self, turn: "Turn") -> Any:
        """What a fresh turn sends the graph: by default ``{"messages": [the user's message]}``."""
        user = turn.user_message
        content = user.content if user is not None else ""
        return {"messages": [HumanMessage(content=content if isinstance(content, str) else json.dumps(content))]}

    def interrupt_key(self, interrupt_id: str) -> str:
        return f"graph:{interrupt_id}"

    async def answers(self, turn: "Turn", interrupts: Any) -> dict[str, Any]:
        """The answers to the graph's pending interrupts; raises TurnSuspended while any is open.

        Every question is asked before the run suspends, so a person answers
        them in one batch.
        """
        answers: dict[str, Any] = {}
        suspended: TurnSuspended | None = None
        for pending in interrupts:
            try:
                answers[pending.id] = await turn.interrupt(
                    self.interrupt_key(pending.id), kind=self.interrupt_kind, payload={"value": _jsonable(pending.value)}
                )
            except InterruptCancelled:
                answers[pending.id] = dict(CANCELLED_ANSWER)
            except TurnSuspended as exc:
                suspended = suspended or exc
        if suspended is not None:
            raise suspended
        return answers

    async def run(self, turn: "Turn") -> None:
        saver = DjangoCheckpointSaver.for_turn(turn)
        graph = self.build_graph(saver)
        thread_id = str(turn.conversation_id)
        text = DurableText(turn, bridge_state(turn, "langgraph"))
        config: dict[str, Any] = {
            "configurable": {"thread_id": thread_id},
            "callbacks": [TurnTokenStream(text)],
            "recursion_limit": self.recursion_limit,
        }
        token = current_turn.set(turn)
        try:
            if not await saver.awritten_by(thread_id, turn.message_id):
                payload: Any = self.graph_input(turn)
            else:
                snapshot = await graph.aget_state(config)
                payload = Command(resume=await self.answers(turn, snapshot.interrupts)) if snapshot.interrupts else None
            while True:
                async for _chunk in graph.astream(payload, config, stream_mode="messages"):
                    pass  # the tokens reached the answer through TurnTokenStream already
                snapshot = await graph.aget_state(config)
                if not snapshot.interrupts:
                    return
                payload = Command(resume=await self.answers(turn, snapshot.interrupts))
        finally:
            current_turn.reset(token)
