"""The OpenAI Agents SDK on the app: a ``Session`` on the conversation store, and ``OpenAIAgentsAgent``.

Install with ``pip install agent-persistence[openai-agents]``.

``ConversationSession(scope, conversation_id)`` implements the SDK's session
protocol (``get_items`` / ``add_items`` / ``pop_item`` / ``clear_session``) on
the conversation's messages, for code that calls ``Runner.run(...,
session=...)`` itself: each SDK item is one message (role and text as the app
shows them, the item itself in ``metadata["openai_item"]``), and messages the
app wrote (a user's message, a durable turn's answer with its tool calls)
read back as SDK items. ``add_items`` is one transaction; ``pop_item`` deletes
with a checked row count, so two concurrent pops never return the same item.

``OpenAIAgentsAgent`` runs an SDK agent as a durable turn with
``Runner.run_streamed``:

- the input is the stored transcript as SDK items (ending with this turn's
  user message);
- text deltas stream into the answer as the model produces them, keyed by the
  model call's position in the turn; each completed model response is
  recorded in ``turn.state`` and replayed on a re-driven run, so a completed
  call is neither paid for nor answered differently the second time;
- each function-tool call goes through ``turn.tool``: recorded on the message,
  checkpointed, never run again after a crash;
- the SDK's tool approvals (``needs_approval``) become ``tool_approval``
  interrupts of the turn (key ``tool:<call_id>``); the answers go back with
  ``RunState.approve`` / ``reject`` and the run goes on;
- each real model call adds its token counts to the run's usage.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from agents import Agent as SDKAgent
from agents import FunctionTool, RunConfig, Runner
from agents.items import ModelResponse
from agents.memory import SessionSettings
from agents.memory.session_settings import coerce_session_settings, resolve_session_limit
from agents.models.interface import Model
from agents.usage import Usage
from asgiref.sync import sync_to_async
from django.db import transaction
from openai.types.responses import Response, ResponseCompletedEvent, ResponseTextDeltaEvent
from pydantic_core import to_jsonable_python

from ..conf import app_settings
from ..exceptions import NotFound
from ..models import InterruptKind
from ..runtime.agents import Agent
from ..runtime.outcomes import CANCELLED_ANSWER, InterruptCancelled, TurnSuspended
from .base import DurableText, ModelCallLog, add_usage, bridge_state

if TYPE_CHECKING:
    from ..models import Message
    from ..runtime.turn import Turn
    from ..scope import Scope

ITEM_KEY = "openai_item"


# -- items and messages --------------------------------------------------------------------------------


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""


def message_for_item(item: Any) -> dict[str, Any]:
    """The message (as ``merge_messages`` takes it) that stores one SDK input item."""
    item = to_jsonable_python(item)
    kind = item.get("type") or ("message" if "role" in item else "")
    message: dict[str, Any] = {"role": "assistant", "content": "", "metadata": {ITEM_KEY: item}}
    if kind == "message" and item.get("role") in ("user", "assistant", "system", "developer"):
        message["role"] = "system" if item["role"] == "developer" else item["role"]
        message["content"] = _text_of(item.get("content"))
    elif kind == "function_call":
        try:
            arguments = json.loads(item.get("arguments") or "{}")
        except ValueError:
            arguments = {"raw": item.get("arguments")}
        message["tool_calls"] = [{"id": item.get("call_id"), "name": item.get("name"), "arguments": arguments}]
    elif kind == "function_call_output":
        message["role"] = "tool"
        message["tool_call_id"] = item.get("call_id")
        output = item.get("output")
        message["content"] = output if isinstance(output, str) else json.dumps(output)
    return message


def items_for_message(message: "Message") -> list[Any]:
    """The SDK input items a stored message stands for (its own item when the session wrote it)."""
    metadata = message.metadata or {}
    if ITEM_KEY in metadata:
        return [metadata[ITEM_KEY]]
    content = message.content if isinstance(message.content, str) else json.dumps(message.content)
    if message.role == "user":
        return [{"role": "user", "content": content}]
    if message.role == "system":
        return [{"role": "system", "content": content}]
    if message.role == "tool":
        return [{"type": "function_call_output", "call_id": message.tool_call_id or "", "output": content}]
    items: list[Any] = []
    for call in message.tool_calls or []:
        if not (isinstance(call, dict) and call.get("id")):
            continue
        items.append({
            "type": "function_call", "call_id": call["id"], "name": call.get("name", ""),
            "arguments": json.dumps(call.get("arguments") or {}),
        })
        if "result" in call:
            result = call["result"]
            items.append({
                "type": "function_call_output", "call_id": call["id"],
                "output": result if isinstance(result, str) else json.dumps(result),
            })
    if content:
        items.append({"role": "assistant", "content": content})
    return items


def items_for_transcript(messages: list["Message"]) -> list[Any]:
    return [item for message in messages for item in items_for_message(message)]


# -- the session ----------------------------------------------------------------------------------------


class _Closed:
    """What :meth:`ConversationSession.close` returns: already done, and awaitable for callers that await it."""

    def __await__(self) -> Any:
        return iter(())


class ConversationSession:
    """The SDK's ``Session`` protocol on one conversation of the conversation store.

    ``agent`` names the conversation's agent when ``add_items`` creates it.
    ``session_settings`` is a ``SessionSettings`` or a plain dict, coerced as
    the SDK's own sessions do (``TypeError`` on an unknown key or another type).
    ``close()`` ends the session as the SDK's sessions do: every later call
    raises ``RuntimeError``; the conversation is untouched.
    """

    def __init__(self, scope: "Scope", conversation_id: Any, *, agent: str = "",
                 session_settings: SessionSettings | dict[str, Any] | None = None) -> None:
        self.scope = scope
        self.conversation_id = conversation_id
        self.session_id = str(conversation_id)
        self.agent = agent
        self.session_settings = (
            coerce_session_settings(session_settings) if session_settings is not None else SessionSettings()
        )
        self.closed = False

    def close(self) -> _Closed:
        """End the session: later calls raise ``RuntimeError``; closing again does nothing.

        The session holds no connection of its own (Django's are per thread and
        request), so there is nothing to release; the stored conversation stays.
        Called as ``SQLiteSession.close()`` is (``session.close()``) or as the
        SDK's async sessions are (``await session.close()``), both work.
        """
        self.closed = True
        return _Closed()

    async def __aenter__(self) -> ConversationSession:
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.close()

    def _check_open(self) -> None:
        if self.closed:
            raise RuntimeError("ConversationSession is closed.")

    def _store(self) -> Any:
        from ..stores import conversation_store

        return conversation_store()

    def _messages(self) -> list["Message"]:
        messages: list[Message] = []
        try:
            while True:
                after = messages[-1].id if messages else None
                page = self._store().list_messages(self.scope, self.conversation_id, limit=100, after=after,
                                                   with_total=False)
                messages.extend(page.items)
                if not page.has_more:
                    return messages
        except NotFound:
            return []

    def _latest_items(self, limit: int) -> list[Any]:
        """The latest ``limit`` items, reading the newest messages only (keyset pages of at most ``limit`` rows).

        A message stands for one item, several (an answer the app wrote with its
        tool calls) or none (an empty answer): the window reads on, past the
        oldest message read, only while it holds fewer than ``limit`` items.
        """
        newest_first: list[Message] = []
        items: list[Any] = []
        page_size = min(limit, int(app_settings.MAX_PAGE_SIZE))
        while True:
            before = newest_first[-1].id if newest_first else None
            try:
                page = self._store().list_messages(self.scope, self.conversation_id, limit=page_size, order="desc",
                                                   before=before, with_total=False)
            except NotFound:
                return []
            newest_first.extend(page.items)
            items = items_for_transcript(newest_first[::-1])
            if len(items) >= limit or not page.has_more:
                return items[-limit:]
            page_size = min(max(limit - len(items), 1), int(app_settings.MAX_PAGE_SIZE))

    def get_items_sync(self, limit: int | None = None) -> list[Any]:
        """The history, oldest first; with ``limit`` (else ``session_settings.limit``), the latest ``limit`` items."""
        self._check_open()
        limit = resolve_session_limit(limit, self.session_settings)
        if limit is None:
            return items_for_transcript(self._messages())
        return self._latest_items(limit) if limit > 0 else []

    def add_items_sync(self, items: list[Any]) -> None:
        """Append ``items`` in one transaction, in order (the conversation is created if absent)."""
        self._check_open()
        if items:
            self._store().merge_messages(
                self.scope, self.conversation_id, [message_for_item(item) for item in items], create=True, agent=self.agent
            )

    def pop_item_sync(self) -> Any | None:
        """Remove and return the latest item; None when there is none."""
        self._check_open()
        while True:
            try:
                page = self._store().list_messages(self.scope, self.conversation_id, limit=1, order="desc")
            except NotFound:
                return None
            if not page.items:
                return None
            message = page.items[0]
            items = items_for_message(message)
            try:
                with transaction.atomic():
                    self._store().delete_message(self.scope, self.conversation_id, message.id)
                    if len(items) > 1:
                        # A message the app wrote that stands for several items: all but the last stay.
                        self.add_items_sync(items[:-1])
            except NotFound:
                continue  # a concurrent pop deleted it first: take the next one
            return items[-1] if items else None

    def clear_session_sync(self) -> None:
        """Delete every message of the conversation, in one transaction (the conversation stays)."""
        self._check_open()
        with transaction.atomic():
            for message in self._messages():
                try:
                    self._store().delete_message(self.scope, self.conversation_id, message.id)
                except NotFound:
                    pass

    async def get_items(self, limit: int | None = None) -> list[Any]:
        return await sync_to_async(self.get_items_sync)(limit)

    async def add_items(self, items: list[Any]) -> None:
        await sync_to_async(self.add_items_sync)(list(items))

    async def pop_item(self) -> Any | None:
        return await sync_to_async(self.pop_item_sync)()

    async def clear_session(self) -> None:
        await sync_to_async(self.clear_session_sync)()


# -- the runner bridge ----------------------------------------------------------------------------------


def _usage(usage: Any) -> dict[str, Any]:
    return {
        "requests": 1,
        "input_tokens": getattr(usage, "input_tokens", 0) or 0,
        "output_tokens": getattr(usage, "output_tokens", 0) or 0,
    }


class ReplayingModel(Model):
    """The agent's model, answering the calls the turn already completed from their records.

    A new streamed call's text deltas go into the answer as they arrive
    (before the SDK sees them), so a recorded response's text is always in the
    checkpoint that records it.
    """

    def __init__(self, wrapped: Model, turn: "Turn", log: ModelCallLog, text: DurableText) -> None:
        self.wrapped = wrapped
        self.turn = turn
        self.log = log
        self.text = text

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        recorded = self.log.next_recorded()
        if recorded is not None:
            self.log.advance()
            response = Response.model_validate(recorded)
            return ModelResponse(output=response.output, usage=Usage(), response_id=response.id)
        result = await self.wrapped.get_response(*args, **kwargs)
        self.log.record({
            "id": result.response_id or "replayed", "created_at": 0, "model": "replayed", "object": "response",
            "output": to_jsonable_python(result.output), "tool_choice": "auto", "tools": [],
            "parallel_tool_calls": False, "status": "completed",
        })
        await add_usage(self.turn, _usage(result.usage))
        return result

    async def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        recorded = self.log.next_recorded()
        if recorded is not None:
            self.log.advance()
            yield ResponseCompletedEvent(type="response.completed", response=Response.model_validate(recorded), sequence_number=0)
            return
        key = f"response:{self.log.step()}"
        async for event in self.wrapped.stream_response(*args, **kwargs):
            if isinstance(event, ResponseTextDeltaEvent):
                self.text.feed(key, event.delta)
            elif isinstance(event, ResponseCompletedEvent):
                self.log.record(event.response.model_dump(mode="json"))
                await add_usage(self.turn, _usage(event.response.usage))
            yield event

    async def close(self) -> None:
        await self.wrapped.close()


def durable_tool(tool: Any, turn: "Turn") -> Any:
    """``tool`` with each call going through ``turn.tool`` (function tools; others are returned as they are)."""
    if not isinstance(tool, FunctionTool):
        return tool
    invoke = tool.on_invoke_tool

    async def on_invoke_tool(context: Any, arguments_json: str) -> Any:
        try:
            arguments = json.loads(arguments_json) if arguments_json else {}
        except ValueError:
            arguments = {"raw": arguments_json}

        async def execute(**_arguments: Any) -> Any:
            return to_jsonable_python(await invoke(context, arguments_json), fallback=repr)

        return await turn.tool(context.tool_call_id, tool.name, arguments, execute)

    return dataclasses.replace(tool, on_invoke_tool=on_invoke_tool)


class OpenAIAgentsAgent(Agent):
    """Runs :attr:`agent` (an SDK ``Agent``) for each turn; see the module docstring."""

    #: The SDK agent to run; or override :meth:`get_agent`.
    agent: SDKAgent[Any] | None = None
    #: The run configuration (its ``model`` / ``model_provider`` pick the model as in the SDK).
    run_config: RunConfig | None = None
    max_turns: int = 10

    def get_agent(self, turn: "Turn") -> SDKAgent[Any]:
        if self.agent is None:
            raise NotImplementedError("OpenAIAgentsAgent subclasses set `agent` or override get_agent(turn).")
        return self.agent

    def get_context(self, turn: "Turn") -> Any:
        """The run's context object (None by default)."""
        return None

    def input_items(self, turn: "Turn") -> list[Any]:
        """The run's input: the stored transcript as SDK items, ending with this turn's user message."""
        return items_for_transcript(turn.transcript)

    def _model(self, agent: SDKAgent[Any], run_config: RunConfig) -> Model:
        chosen = run_config.model if run_config.model is not None else agent.model
        if isinstance(chosen, Model):
            return chosen
        return run_config.model_provider.get_model(chosen)

    async def answer_approvals(self, turn: "Turn", run_state: Any, interruptions: list[Any]) -> None:
        """Ask every pending approval as an interrupt; approve or reject each answered one."""
        suspended: TurnSuspended | None = None
        for item in interruptions:
            raw = to_jsonable_python(item.raw_item)
            call_id = raw.get("call_id") or raw.get("id") or ""
            name = item.tool_name or raw.get("name") or ""
            try:
                arguments = json.loads(raw.get("arguments") or "{}")
            except ValueError:
                arguments = {"raw": raw.get("arguments")}
            try:
                answer = await turn.interrupt(
                    f"tool:{call_id}", kind=InterruptKind.TOOL_APPROVAL,
                    payload={"tool_call_id": call_id, "name": name, "arguments": arguments},
                )
            except InterruptCancelled:
                answer = dict(CANCELLED_ANSWER)
            except TurnSuspended as exc:
                suspended = suspended or exc
                continue
            if isinstance(answer, dict) and answer.get("approved") is True:
                run_state.approve(item)
            else:
                reason = answer.get("reason") if isinstance(answer, dict) else None
                run_state.reject(item, rejection_message=reason)
                denial = {"denied": True, "reason": reason}
                await turn.tool(call_id, name, arguments, lambda **_: denial)
        if suspended is not None:
            raise suspended

    async def run(self, turn: "Turn") -> None:
        agent = self.get_agent(turn)
        state = bridge_state(turn, "openai_agents")
        text = DurableText(turn, state)
        log = ModelCallLog(state)
        run_config = self.run_config or RunConfig()
        model = ReplayingModel(self._model(agent, run_config), turn, log, text)
        run_config = dataclasses.replace(run_config, model=model)
        durable_agent = agent.clone(tools=[durable_tool(tool, turn) for tool in agent.tools])
        run_input: Any = self.input_items(turn)
        while True:
            result = Runner.run_streamed(
                durable_agent, run_input, context=self.get_context(turn), max_turns=self.max_turns, run_config=run_config
            )
            try:
                async for _event in result.stream_events():
                    pass  # the text reached the answer in ReplayingModel already
            finally:
                if not result.is_complete:
                    result.cancel()
            if not result.interruptions:
                return
            run_state = result.to_state()
            await self.answer_approvals(turn, run_state, result.interruptions)
            run_input = run_state
