"""Graceful shutdown: a process that is going away hands its turns off instead of dropping them.

:func:`drain` is what a process runs when it is told to stop (the ASGI lifespan ``shutdown``
event, see :mod:`agent_persistence.realtime.lifespan`; SIGTERM in a command, see
:func:`drain_on_sigterm`):

1. the process stops taking turns: a start, resume or answer that would drive a turn here is
   refused with :class:`~agent_persistence.exceptions.ShuttingDown` (HTTP 503 ``shutting_down``,
   an ``error`` frame on a websocket), so the client retries on another replica; the reaper of
   this process stops;
2. turns that end within ``SHUTDOWN_GRACE`` seconds end here, as usual;
3. the others are handed off at a step boundary (a tool call in flight is let finish and is
   checkpointed, for at most another ``SHUTDOWN_GRACE``): the agent is stopped
   (``Outcome.HANDED_OFF``), its recording and checkpoint are flushed and the turn is released
   as ``handed_off`` at epoch + 1, fenced, then announced on the channel layer. The turns of a
   loop stopped together are written together (:func:`.handoff_writes.hand_off_together`: one database call for
   them all, three statements' worth of transactions, not three per turn);
   a surviving replica claims it at once and resumes it from the checkpoint (a completed tool
   call or model response is never made again; a model call in flight when the grace ran out is,
   and is counted: :attr:`~.producer.DrainReport.model_calls_in_flight`, the log, and the
   ``in_flight`` of the turn's ``handed_off`` event).

It drains every event loop of the process that has producers (the producer loop of a server,
the main loop of a command or worker), from whichever loop or thread calls it; a worker process
reuses it as it stands.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal

from ..conf import app_settings
from ..exceptions import ShuttingDown
from .producer import CLAIM_POLL, HAND_OFF_TIMEOUT, DrainReport, Supervisor, claims_in_flight

logger = logging.getLogger(__name__)

_draining_in = 0  # the process id that is draining (a process forked from it is not)



def is_draining() -> bool:
    """Whether this process is shutting down (it takes no turn)."""
    return _draining_in == os.getpid()


def refuse_if_draining() -> None:
    """Raise :class:`ShuttingDown` when this process is shutting down: the caller retries elsewhere."""
    if is_draining():
        raise ShuttingDown()


def stop_taking_turns() -> None:
    """Refuse every turn from now on in this process, and stop its reapers (the first step of :func:`drain`)."""
    global _draining_in
    _draining_in = os.getpid()
    for loop, supervisor in list(Supervisor._by_loop.items()):
        if loop.is_closed():
            continue
        try:
            loop.call_soon_threadsafe(supervisor.stop_reaper)
        except RuntimeError:  # closed meanwhile
            pass


def resume_taking_turns() -> None:
    """Undo :func:`stop_taking_turns` (tests; a process whose shutdown was called off)."""
    global _draining_in
    _draining_in = 0


async def drain(grace: float | None = None) -> DrainReport:
    """Stop taking turns, let them run for ``grace`` (default ``SHUTDOWN_GRACE``) seconds, hand off the rest.

    Returns once every turn of the process has ended or been handed off (or could not be: it is then
    left to a reaper, as after a crash). Safe to call from any loop or thread; a second call drains again.
    """
    grace = app_settings.SHUTDOWN_GRACE if grace is None else grace
    stop_taking_turns()
    current = asyncio.get_running_loop()
    # A start, continuation or resume that passed the refusal before it may still be committing its claim:
    # wait for its producer (bounded), so that turn is drained too instead of left claimed with none.
    claims_deadline = current.time() + grace + HAND_OFF_TIMEOUT
    while claims_in_flight() and current.time() < claims_deadline:
        await asyncio.sleep(CLAIM_POLL)
    drains = []
    for loop, supervisor in list(Supervisor._by_loop.items()):
        if loop is current:
            drains.append(asyncio.ensure_future(supervisor.drain(grace)))
        elif loop.is_running():
            drains.append(asyncio.wrap_future(asyncio.run_coroutine_threadsafe(supervisor.drain(grace), loop)))
    report = DrainReport()
    for result in await asyncio.gather(*drains, return_exceptions=True):
        if isinstance(result, BaseException):
            logger.error("Draining the turns of one event loop failed.", exc_info=result)
            continue
        report.add(result)
    if report.handed_off or report.left:
        logger.warning(
            "Shutdown: %d turn(s) handed off (%d with a model call in flight, %d with a tool call in flight), "
            "%d left for a reaper.", report.handed_off, report.model_calls_in_flight, report.tool_calls_in_flight,
            report.left,
        )
    return report


def drain_on_sigterm(loop: asyncio.AbstractEventLoop | None = None) -> "asyncio.Future[DrainReport]":
    """On SIGTERM (and SIGINT), :func:`drain` this process; the future is done once the drain is.

    For commands and workers that drive producers on their own loop (``manage.py reap_turns --resume
    --loop``): install it on the loop, stop the command's own work once ``is_draining()`` (or the
    future is done), then return. A second signal while draining is ignored (the drain is bounded).
    """
    loop = loop or asyncio.get_running_loop()
    done: asyncio.Future[DrainReport] = loop.create_future()

    def on_signal() -> None:
        if is_draining():
            return
        logger.warning("Shutdown requested: draining the turns of this process (SHUTDOWN_GRACE %s s).",
                       app_settings.SHUTDOWN_GRACE)

        def finished(task: "asyncio.Task[DrainReport]") -> None:
            if done.done():
                return
            if task.exception() is not None:
                done.set_exception(task.exception())  # type: ignore[arg-type]
            else:
                done.set_result(task.result())

        loop.create_task(drain()).add_done_callback(finished)

    for number in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(number, on_signal)
    return done


__all__ = ["DrainReport", "drain", "drain_on_sigterm", "is_draining", "refuse_if_draining", "resume_taking_turns",
           "stop_taking_turns"]
