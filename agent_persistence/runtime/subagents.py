"""Subagents: child runs of a turn's run whose stream, tool calls and interrupts belong to the parent turn.

``async with turn.subagent("researcher") as researcher:`` opens a child run
(``parent`` = the turn's run, ``name`` = the subagent's) and ends it when the
block ends: completed when it returns, failed when it raises, interrupted
(parked, not finished) when one of its questions waits for an answer, aborted
when the turn is stopped. The run's usage is kept whatever the outcome.

The child's id is derived from the turn and the subagent's key, so a turn
re-driven after its interrupts were answered continues the very same child
run (the seed's same-id continuation: interrupted, then running, then
finished). A child that has finished (a crash takeover aborts the turn's open
runs) is never resurrected: the next generation of the key gets a new run.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import uuid
from typing import TYPE_CHECKING, Any, AsyncIterator, Awaitable, Callable

from ..exceptions import Fenced
from ..statuses import OPEN_RUN_STATUSES, InterruptKind, RunStatus

if TYPE_CHECKING:
    from ..models import Run
    from .turn import Turn

# Deterministic child run ids: the same subagent of a re-driven turn is the same run.
SUBAGENT_NAMESPACE = uuid.UUID("2f6b9e34-0c6d-4c1e-9f43-5b7d2a8e1c07")


class Subagent:
    """What the agent drives a subagent with: a child run of the turn, streaming into the turn's answer."""

    def __init__(self, turn: "Turn", *, name: str, key: str, run_id: uuid.UUID) -> None:
        self._turn = turn
        self.name = name
        self.key = key
        self.run_id = run_id
        self.parent_run_id = turn.run_id

    @property
    def cancelled(self) -> bool:
        """True once a stop of the turn was requested."""
        return self._turn.cancelled

    def stream(self, text: str) -> None:
        """Append ``text`` to the turn's answer, as :meth:`Turn.stream <agent_persistence.runtime.turn.Turn.stream>`."""
        self._turn.stream(text)

    async def add_usage(self, usage: dict[str, int | float]) -> None:
        """Add a model call's counters to this child run's usage (not the parent's), fenced by the turn's epoch."""
        await self._turn._add_run_usage(self.run_id, usage)

    async def interrupt(
        self,
        key: str,
        *,
        kind: str = InterruptKind.GENERIC,
        payload: dict[str, Any] | None = None,
        expires_in: float | None = None,
    ) -> Any:
        """Ask a question of the turn on behalf of this child run (the interrupt's run is the child)."""
        return await self._turn._ask(self._question(key), run_id=self.run_id, kind=kind, payload=payload,
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
        return await self._turn._call_tool(call_id, name, arguments, func, approval=approval, run_id=self.run_id,
                                           question=self._question(f"tool:{call_id}"))

    def _question(self, key: str) -> str:
        return f"subagent:{self.key}:{key}"


def child_run_id(message_id: uuid.UUID, key: str, generation: int) -> uuid.UUID:
    return uuid.uuid5(SUBAGENT_NAMESPACE, f"{message_id}:{key}:{generation}")


async def open_child_run(turn: "Turn", name: str, key: str) -> "Run":
    """The subagent's open child run: the one a parked child continues, or a new one of the next generation."""
    from ..stores import run_store

    producer = turn._producer
    for generation in itertools.count():
        run_id = child_run_id(turn.message_id, key, generation)
        run = await producer.persist("subagent run", lambda: run_store().acreate_or_resume(
            turn.scope, turn.conversation_id, id=run_id, message_id=turn.message_id, name=name,
            parent_id=turn.run_id, epoch=producer.epoch,
        ))
        if run.status in OPEN_RUN_STATUSES:
            break
    if run.status == RunStatus.INTERRUPTED:
        run = await producer.persist("subagent run", lambda: run_store().aset_status(
            turn.scope, run.pk, RunStatus.RUNNING, epoch=producer.epoch
        ))
    return run


@contextlib.asynccontextmanager
async def subagent_run(turn: "Turn", name: str, key: str) -> AsyncIterator[Subagent]:
    """Open the child run, yield its :class:`Subagent`, and record how the block ended."""
    from ..stores import run_store
    from .producer import Outcome
    from .turn import TurnSuspended

    producer = turn._producer
    run = await open_child_run(turn, name, key)

    async def end(status: str, error: dict[str, str] | None = None) -> None:
        if status == RunStatus.INTERRUPTED:
            write = lambda: run_store().aset_status(turn.scope, run.pk, status, epoch=producer.epoch)  # noqa: E731
        else:
            write = lambda: run_store().afinish(turn.scope, run.pk, status, error=error, epoch=producer.epoch)  # noqa: E731
        await producer.persist("subagent run", write)

    try:
        yield Subagent(turn, name=name, key=key, run_id=run.pk)
    except TurnSuspended:
        await end(RunStatus.INTERRUPTED)
        raise
    except asyncio.CancelledError:
        # As the producer judges its own run: a stop aborts, the run time limit fails, a shutdown writes nothing.
        with contextlib.suppress(Exception):  # the stop propagates whatever this write meets (a fence, say)
            if producer.stop_reason is Outcome.CANCELLED:
                await end(RunStatus.ABORTED, {"code": "cancelled", "message": "The turn was stopped."})
            elif producer.stop_reason is Outcome.ERRORED:
                await end(RunStatus.FAILED, {"code": "max_run_time", "message": "The turn ran longer than MAX_RUN_TIME."})
        raise
    except Fenced:
        raise
    except Exception as exc:
        await end(RunStatus.FAILED, {"code": "agent_error", "message": f"{type(exc).__name__}: {exc}"[:1000]})
        raise
    await end(RunStatus.COMPLETED)
