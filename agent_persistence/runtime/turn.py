"""What an agent sees of its turn: transcript, state, streaming, tools, interrupts, cancellation.

A :class:`Turn` reaches the run that drives it through the :class:`~.host.TurnHost` protocol
(the producer implements it). Its child runs (:mod:`.subagents`) use its public API for them
(``interrupt_for``, ``tool_for``, ``add_usage_for``, ``child_transcript``, ``persist``,
``stop_reason``), never its private members.
"""

from __future__ import annotations

import copy
import inspect
import uuid
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from ..scope import Scope
from ..statuses import InterruptKind, InterruptStatus
from .outcomes import CANCELLED_ANSWER, InterruptCancelled, Outcome, TurnSuspended
from .subagents import Subagent, subagent_run

if TYPE_CHECKING:
    from ..models import Message
    from .host import TurnHost

# Deterministic interrupt ids: the same question in a re-driven run has the same id.
INTERRUPT_NAMESPACE = uuid.UUID("6f0b4a52-36b4-4d55-9c3a-3f1e4b0f7a10")
# Deterministic activity ids: the same activity key in a re-driven run updates the same row.
ACTIVITY_NAMESPACE = uuid.UUID("2b9e7c1d-5a40-4f8e-9d3b-7c6a1e0f4b21")

# TurnSuspended, InterruptCancelled and CANCELLED_ANSWER are re-exported: the agent API names them beside Turn.


class Turn:
    """One run of an agent for one turn.

    - ``transcript``: the stored messages of the conversation, oldest first,
      ending with the user message of this turn (clients send only that one).
    - ``state``: the agent's working state, restored from the last checkpoint;
      mutate it freely, it is saved every ``CHECKPOINT_INTERVAL`` seconds,
      after every tool call and when the run ends.
    - ``resumed``: true when this run continues a turn (after a crash or an
      answered interrupt) rather than starting it.
    - ``cancelled``: true once a stop was requested; the agent should return
      soon (the runtime also cancels it at its next ``await``).
    """

    def __init__(
        self,
        *,
        host: TurnHost,
        scope: Scope,
        conversation_id: uuid.UUID,
        message_id: uuid.UUID,
        run_id: uuid.UUID,
        transcript: list[Message],
        state: dict[str, Any],
        resumed: bool,
        text: str = "",
        tool_calls: list[dict[str, Any]] | None = None,
        tool_results: dict[str, Any] | None = None,
        answers: dict[str, Any] | None = None,
        subagents: dict[str, list[dict[str, Any]]] | None = None,
    ) -> None:
        self._host = host
        self.scope = scope
        self.conversation_id = conversation_id
        self.message_id = message_id
        self.run_id = run_id
        self.transcript = transcript
        self.state = state
        self.resumed = resumed
        self._text = text
        self._tool_calls = tool_calls or []
        self._tool_results = tool_results or {}
        self._answers = answers or {}
        # The transcripts of the subagents still open in this turn, by key (checkpointed with the text).
        self._subagent_transcripts: dict[str, list[dict[str, Any]]] = subagents or {}
        #: Tool calls running now (with their checkpoint): a hand-off waits for them, a step boundary.
        self.tools_running = 0

    @property
    def user_message(self) -> Message | None:
        for message in reversed(self.transcript):
            if message.role == "user":
                return message
        return None

    @property
    def text(self) -> str:
        """The answer streamed so far (restored text included)."""
        return self._text

    @property
    def cancelled(self) -> bool:
        return self._host.cancel_requested

    @property
    def epoch(self) -> int:
        """The lease epoch of the run driving this turn: every write the run makes is fenced by it."""
        return self._host.epoch

    async def add_usage(self, usage: dict[str, int | float]) -> None:
        """Add a model call's counters (``{"input_tokens": 12, ...}``) to the run's usage, fenced by its epoch.

        What was added stays on the run however it ends (completed, failed or aborted).
        """
        await self.add_usage_for(self.run_id, usage)

    def subagent(self, name: str, *, key: str | None = None) -> AbstractAsyncContextManager[Subagent]:
        """A child run of this run for a subagent, as ``async with turn.subagent("researcher") as sub:``.

        The child run has ``parent`` = this run and ``name``; what it streams
        goes into this turn's answer and its questions are this turn's
        interrupts. ``key`` (default ``name``) tells two subagents of one name
        apart within the turn. See :mod:`agent_persistence.runtime.subagents`.
        """
        if not isinstance(name, str) or not name:
            raise TypeError("turn.subagent() takes a name.")
        return subagent_run(self, name, name if key is None else key)

    async def save_checkpoint(self) -> None:
        """Save the turn's checkpoint now (the runtime also saves it periodically and after every tool call)."""
        await self._host.save_checkpoint()

    def stream(self, text: str) -> None:
        """Append ``text`` to the answer. It reaches followers within one flush interval.

        Deliberately not a coroutine: streaming and the state change that goes
        with it (``turn.state[...] = ...`` on the next line) happen with no
        ``await`` between them, so a checkpoint always holds both or neither.
        """
        if not isinstance(text, str):
            raise TypeError("turn.stream() takes text.")
        if text:
            self._text += text
            self._host.message_changed()

    def message(self) -> dict[str, Any]:
        """The cumulative assistant message as followers and the transcript see it."""
        message: dict[str, Any] = {"role": "assistant", "content": self._text}
        if self._tool_calls:
            message["tool_calls"] = copy.deepcopy(self._tool_calls)
        return message

    def snapshot(self) -> dict[str, Any]:
        """Everything a re-driven run needs, as one JSON-able blob."""
        return {
            "message_id": str(self.message_id),
            "agent": copy.deepcopy(self.state),
            "text": self._text,
            "tool_calls": copy.deepcopy(self._tool_calls),
            "tool_results": copy.deepcopy(self._tool_results),
            "subagents": copy.deepcopy(self._subagent_transcripts),
        }

    async def tool(
        self,
        call_id: str,
        name: str,
        arguments: dict[str, Any],
        func: Callable[..., Any] | Callable[..., Awaitable[Any]],
        *,
        approval: bool = False,
    ) -> Any:
        """Call a tool once per ``call_id``, ever.

        A call completed before a crash returns its recorded result and does not
        run again. With ``approval``, a person must approve it first (a
        ``tool_approval`` interrupt); a denial returns ``{"denied": True, ...}``
        without running the tool, and so does a cancelled approval
        (``{"denied": True, "cancelled": True, ...}``).
        """
        return await self.tool_for(self.run_id, f"tool:{call_id}", call_id, name, arguments, func, approval=approval)

    async def tool_for(
        self,
        run_id: uuid.UUID,
        question: str,
        call_id: str,
        name: str,
        arguments: dict[str, Any],
        func: Callable[..., Any] | Callable[..., Awaitable[Any]],
        *,
        approval: bool = False,
    ) -> Any:
        """:meth:`tool` on behalf of ``run_id`` (this run or a child run): an approval is asked as ``question`` for it.

        The call is the turn's (one per ``call_id`` of the turn, recorded in its answer and checkpoint).
        """
        if call_id in self._tool_results:
            return self._tool_results[call_id]
        if approval:
            payload = {"tool_call_id": call_id, "name": name, "arguments": arguments}
            try:
                answer = await self.interrupt_for(run_id, question, kind=InterruptKind.TOOL_APPROVAL, payload=payload)
            except InterruptCancelled:
                answer = dict(CANCELLED_ANSWER)
            if not (isinstance(answer, dict) and answer.get("approved") is True):
                result: Any = {"denied": True, "reason": answer.get("reason") if isinstance(answer, dict) else None}
                if isinstance(answer, dict) and answer.get("cancelled") is True:
                    result["cancelled"] = True
                await self._record_tool(call_id, name, arguments, result)
                return result
        self.tools_running += 1
        try:
            result = func(**arguments)
            if inspect.isawaitable(result):
                result = await result
            await self._record_tool(call_id, name, arguments, result)
        finally:
            self.tools_running -= 1
        if not self.tools_running:
            self._host.step_done()
        return result

    async def _record_tool(self, call_id: str, name: str, arguments: dict[str, Any], result: Any) -> None:
        self._tool_results[call_id] = result
        self._tool_calls.append({"id": call_id, "name": name, "arguments": arguments, "result": result})
        self._host.message_changed()
        # The result is saved before the agent goes on, so a crash never runs the tool twice.
        await self._host.save_checkpoint()

    async def interrupt(
        self,
        key: str,
        *,
        kind: str = InterruptKind.GENERIC,
        payload: dict[str, Any] | None = None,
        expires_in: float | None = None,
    ) -> Any:
        """Ask a person (or the client) and wait for the answer.

        ``key`` names the question within the turn; a re-driven run that asks
        the same question gets the recorded answer back at once. Otherwise the
        run ends as interrupted and a later run of the turn continues here once
        the conversation's pending interrupts are settled. A question the
        settling batch cancelled raises :class:`InterruptCancelled` here.
        """
        return await self.interrupt_for(self.run_id, key, kind=kind, payload=payload, expires_in=expires_in)

    async def interrupt_for(
        self,
        run_id: uuid.UUID,
        key: str,
        *,
        kind: str = InterruptKind.GENERIC,
        payload: dict[str, Any] | None = None,
        expires_in: float | None = None,
    ) -> Any:
        """:meth:`interrupt` on behalf of ``run_id`` (this run or a child run): the question's run is ``run_id``.

        ``key`` names the question within the turn, whichever run asks it.
        """
        interrupt_id = uuid.uuid5(INTERRUPT_NAMESPACE, f"{self.message_id}:{key}")
        if str(interrupt_id) in self._answers:
            return self._answers[str(interrupt_id)]
        # Insert-if-absent: a question asked before comes back as it is stored now.
        stored = await self._host.raise_interrupt(
            interrupt_id, run_id=run_id, kind=kind, payload=payload or {}, expires_in=expires_in
        )
        if stored.status == InterruptStatus.RESOLVED:
            return stored.response
        if stored.status == InterruptStatus.CANCELLED:
            raise InterruptCancelled(interrupt_id)
        raise TurnSuspended(interrupt_id)

    async def activity(
        self, key: str, activity_type: str, content: dict[str, Any], *, metadata: dict[str, Any] | None = None
    ) -> uuid.UUID:
        """Show an activity row beside the answer (an AG-UI ``ACTIVITY_SNAPSHOT``: a search progress card, say).

        ``key`` names the activity within the turn: calling again with the same
        key replaces that row's ``activity_type``, ``content`` and ``metadata``
        (progress), and a re-driven run that repeats it updates the same row.
        The row is saved in the conversation's activity list (fenced by the
        run's epoch) and sent to every follower as an ``activity`` frame; it
        is never part of the transcript the model reads. A failed save is
        logged and never fails the turn. Returns the activity's id.
        """
        activity_id = uuid.uuid5(ACTIVITY_NAMESPACE, f"{self.message_id}:{key}")
        await self._host.save_activity({
            "id": activity_id,
            "activity_type": activity_type,
            "content": content,
            "metadata": metadata or {},
            "message_id": self.message_id,
            "run_id": self.run_id,
        })
        return activity_id

    # -- answers, read again by the host ---------------------------------------------------------

    def receive_answers(self, answers: dict[str, Any]) -> None:
        """The settled answers of the turn's interrupts, by interrupt id, for the questions the run asks again.

        The host calls it when every question was answered before the run could go idle, and
        drives the agent on at once.
        """
        self._answers = dict(answers)

    # -- child runs (:mod:`.subagents`) ------------------------------------------------------------

    @property
    def stop_reason(self) -> Outcome | None:
        """Why the run is being stopped (a cancel, the run time limit, a fence, a shutdown); None while it runs."""
        return self._host.stop_reason

    async def persist(self, what: str, write: Callable[[], Awaitable[Any]]) -> Any:
        """Await ``write()`` (a store write fenced by :attr:`epoch`), retried while the database refuses it.

        ``what`` names the write in the log. A fenced write is never retried.
        """
        return await self._host.persist(what, write)

    async def add_usage_for(self, run_id: uuid.UUID, usage: dict[str, int | float]) -> None:
        """:meth:`add_usage` to ``run_id`` (this run or a child run), fenced by this run's epoch."""
        from ..stores import run_store

        await self.persist("usage", lambda: run_store().aadd_usage(self.scope, run_id, usage, epoch=self.epoch))

    def child_transcript(self, run_id: uuid.UUID) -> list[dict[str, Any]]:
        """The transcript of the open child run ``run_id`` (started empty), kept in the turn's checkpoint.

        The list itself: what the child appends to it is in the next checkpoint, so a re-driven
        turn continues the child's transcript where the checkpoint left it.
        """
        return self._subagent_transcripts.setdefault(str(run_id), [])

    def end_child_transcript(self, run_id: uuid.UUID) -> None:
        """Drop the finished child run's transcript from the checkpoint (its run keeps it)."""
        self._subagent_transcripts.pop(str(run_id), None)
