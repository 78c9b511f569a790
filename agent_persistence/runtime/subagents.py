"""Subagents: child runs of a turn's run whose stream, tool calls and interrupts belong to the parent turn.

``async with turn.subagent("researcher") as researcher:`` opens a child run
(``parent`` = the turn's run, ``name`` = the subagent's) and ends it when the
block ends: completed when it returns, failed when it raises, interrupted
(parked, not finished) when one of its questions waits for an answer, aborted
when the turn is stopped. The run's usage is kept whatever the outcome.

The child's id is derived from the turn and the subagent's key, so a turn
re-driven after its interrupts were answered continues the very same child
run (interrupted, then running, then finished, under one id, so the
subagent's card and its questions stay one run). A child that has finished (a crash takeover aborts the turn's open
runs) is never resurrected: the next generation of the key gets a new run.

The child keeps a transcript of its own, the run's ``transcript``: what it
streamed, its tool calls with their results, and any message the agent adds
with :meth:`Subagent.message` (the task it was given, say). It is kept in the
turn's checkpoint while the child is open, so a re-driven turn continues it
where the checkpoint left it, and written to the run with the run's status at
every end of the block (completed, failed, interrupted or aborted). It is the
subagent card's transcript on reload and never part of the model's
transcript. A child the turn leaves parked (interrupted, never re-entered) is
aborted when the turn ends.

A subagent uses only the turn's public API for child runs (:class:`ParentTurn`,
which :class:`~.turn.Turn` provides), so this module needs nothing of the turn's
module or of the producer, and the turn can import it.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import itertools
import logging
import uuid
from typing import TYPE_CHECKING, Any, AsyncIterator, Awaitable, Callable, Protocol

from ..exceptions import Fenced, StorageLimit, Validation
from ..scope import Scope
from ..statuses import OPEN_RUN_STATUSES, InterruptKind, RunStatus
from .outcomes import Outcome, TurnSuspended

if TYPE_CHECKING:
    from ..models import Run

logger = logging.getLogger(__name__)

# Deterministic child run ids: the same subagent of a re-driven turn is the same run.
SUBAGENT_NAMESPACE = uuid.UUID("2f6b9e34-0c6d-4c1e-9f43-5b7d2a8e1c07")


class ParentTurn(Protocol):
    """What a child run uses of its turn: the child-run methods of :class:`~.turn.Turn`."""

    scope: Scope
    conversation_id: uuid.UUID
    message_id: uuid.UUID
    run_id: uuid.UUID

    @property
    def epoch(self) -> int: ...

    @property
    def cancelled(self) -> bool: ...

    @property
    def stop_reason(self) -> Outcome | None: ...

    def stream(self, text: str) -> None: ...

    async def persist(self, what: str, write: Callable[[], Awaitable[Any]]) -> Any: ...

    async def add_usage_for(self, run_id: uuid.UUID, usage: dict[str, int | float]) -> None: ...

    async def interrupt_for(self, run_id: uuid.UUID, key: str, *, kind: str = ..., payload: dict[str, Any] | None = None,
                            expires_in: float | None = None) -> Any: ...

    async def tool_for(self, run_id: uuid.UUID, question: str, call_id: str, name: str, arguments: dict[str, Any],
                       func: Callable[..., Any] | Callable[..., Awaitable[Any]], *, approval: bool = False) -> Any: ...

    def child_transcript(self, run_id: uuid.UUID) -> list[dict[str, Any]]: ...

    def end_child_transcript(self, run_id: uuid.UUID) -> None: ...


class Subagent:
    """What the agent drives a subagent with: a child run of the turn, streaming into the turn's answer."""

    def __init__(self, turn: ParentTurn, *, name: str, key: str, run_id: uuid.UUID) -> None:
        self._turn = turn
        self.name = name
        self.key = key
        self.run_id = run_id
        self.parent_run_id = turn.run_id
        self._transcript = turn.child_transcript(run_id)

    @property
    def transcript(self) -> list[dict[str, Any]]:
        """The child's own messages so far, oldest first (a copy)."""
        return copy.deepcopy(self._transcript)

    def message(self, role: str, content: Any, **fields: Any) -> None:
        """Add a message to the child's transcript only (not the turn's answer): the task it was given, say.

        ``fields`` are a transcript message's others (``name``,
        ``tool_call_id``, ``tool_calls``, ``metadata``); the message is checked
        now, as the run store checks it.
        """
        from ..stores.runs import clean_transcript

        (cleaned,) = clean_transcript([{"role": role, "content": content, **fields}])
        self._transcript.append(cleaned)

    def _answer(self) -> dict[str, Any]:
        """The child's assistant message being written: the last one, or a new one after anything else.

        An assistant message that made tool calls is followed by their results, so it is never written on.
        """
        last = self._transcript[-1] if self._transcript else None
        if last is None or last["role"] != "assistant" or last.get("tool_calls"):
            self._transcript.append({"role": "assistant", "content": ""})
        return self._transcript[-1]

    @property
    def cancelled(self) -> bool:
        """True once a stop of the turn was requested."""
        return self._turn.cancelled

    def stream(self, text: str) -> None:
        """Append ``text`` to the turn's answer, as :meth:`Turn.stream <agent_persistence.runtime.turn.Turn.stream>`, and to the child's."""
        self._turn.stream(text)
        if text:
            answer = self._answer()
            answer["content"] = (answer.get("content") or "") + text

    async def add_usage(self, usage: dict[str, int | float]) -> None:
        """Add a model call's counters to this child run's usage (not the parent's), fenced by the turn's epoch."""
        await self._turn.add_usage_for(self.run_id, usage)

    async def interrupt(
        self,
        key: str,
        *,
        kind: str = InterruptKind.GENERIC,
        payload: dict[str, Any] | None = None,
        expires_in: float | None = None,
    ) -> Any:
        """Ask a question of the turn on behalf of this child run (the interrupt's run is the child)."""
        return await self._turn.interrupt_for(self.run_id, self._question(key), kind=kind, payload=payload,
                                              expires_in=expires_in)

    async def tool(
        self,
        call_id: str,
        name: str,
        arguments: dict[str, Any],
        func: Callable[..., Any] | Callable[..., Awaitable[Any]],
        *,
        approval: bool = False,
    ) -> Any:
        """Call a tool once per ``call_id`` of the turn; an approval is asked on behalf of this child run."""
        result = await self._turn.tool_for(self.run_id, self._question(f"tool:{call_id}"), call_id, name, arguments, func,
                                           approval=approval)
        self._record_tool(call_id, name, arguments, result)
        return result

    def _record_tool(self, call_id: str, name: str, arguments: dict[str, Any], result: Any) -> None:
        """The call on the child's assistant message and its result as a tool message (once per call id)."""
        if any(call.get("id") == call_id for message in self._transcript for call in message.get("tool_calls") or ()):
            return
        answer = self._answer()
        answer["tool_calls"] = [{"id": call_id, "name": name, "arguments": copy.deepcopy(arguments)}]
        # Text streamed after the result starts the child's next assistant message (see _answer).
        self._transcript.append({"role": "tool", "tool_call_id": call_id, "name": name, "content": copy.deepcopy(result)})

    def _question(self, key: str) -> str:
        return f"subagent:{self.key}:{key}"


def stored_transcript(transcript: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """The transcript as the run stores it; None, logged, when the store would refuse it.

    A child whose transcript outgrew what a run keeps still ends with its
    status: the transcript is left as last stored rather than failing the turn.
    """
    from ..stores.runs import clean_transcript

    try:
        return clean_transcript(transcript)
    except (Validation, StorageLimit) as exc:
        logger.warning("A subagent's transcript was not stored: %s", exc)
        return None


def child_run_id(message_id: uuid.UUID, key: str, generation: int) -> uuid.UUID:
    return uuid.uuid5(SUBAGENT_NAMESPACE, f"{message_id}:{key}:{generation}")


async def open_child_run(turn: ParentTurn, name: str, key: str) -> Run:
    """The subagent's open child run: the one a parked child continues, or a new one of the next generation."""
    from ..stores import run_store

    for generation in itertools.count():
        run_id = child_run_id(turn.message_id, key, generation)
        run = await turn.persist("subagent run", lambda: run_store().acreate_or_resume(
            turn.scope, turn.conversation_id, id=run_id, message_id=turn.message_id, name=name,
            parent_id=turn.run_id, epoch=turn.epoch,
        ))
        if run.status in OPEN_RUN_STATUSES:
            break
    if run.status == RunStatus.INTERRUPTED:
        run = await turn.persist("subagent run", lambda: run_store().aset_status(
            turn.scope, run.pk, RunStatus.RUNNING, epoch=turn.epoch
        ))
    return run


@contextlib.asynccontextmanager
async def subagent_run(turn: ParentTurn, name: str, key: str) -> AsyncIterator[Subagent]:
    """Open the child run, yield its :class:`Subagent`, and record how the block ended."""
    from ..stores import run_store

    run = await open_child_run(turn, name, key)
    subagent = Subagent(turn, name=name, key=key, run_id=run.pk)

    async def end(status: str, error: dict[str, str] | None = None) -> None:
        transcript = stored_transcript(subagent._transcript)
        if status == RunStatus.INTERRUPTED:
            write = lambda: run_store().aset_status(  # noqa: E731
                turn.scope, run.pk, status, transcript=transcript, epoch=turn.epoch
            )
        else:
            # Finished: the next generation of the key starts a transcript of its own.
            turn.end_child_transcript(run.pk)
            write = lambda: run_store().afinish(  # noqa: E731
                turn.scope, run.pk, status, error=error, transcript=transcript, epoch=turn.epoch
            )
        await turn.persist("subagent run", write)

    try:
        yield subagent
    except TurnSuspended:
        await end(RunStatus.INTERRUPTED)
        raise
    except asyncio.CancelledError:
        # As the producer judges its own run: a stop aborts, the run time limit fails, a shutdown writes nothing.
        with contextlib.suppress(Exception):  # the stop propagates whatever this write meets (a fence, say)
            if turn.stop_reason is Outcome.CANCELLED:
                await end(RunStatus.ABORTED, {"code": "cancelled", "message": "The turn was stopped."})
            elif turn.stop_reason is Outcome.ERRORED:
                await end(RunStatus.FAILED, {"code": "max_run_time", "message": "The turn ran longer than MAX_RUN_TIME."})
        raise
    except Fenced:
        raise
    except Exception as exc:
        await end(RunStatus.FAILED, {"code": "agent_error", "message": f"{type(exc).__name__}: {exc}"[:1000]})
        raise
    await end(RunStatus.COMPLETED)
