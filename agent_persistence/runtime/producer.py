"""Producers: the asyncio task that drives one turn, and the per-process supervisor.

A producer runs in the process that accepted the turn. Its periodic work is
batched per process by the :class:`Supervisor`, per event loop: every
``HEARTBEAT_INTERVAL`` one epoch-guarded statement stamps the heartbeat of all
live turns and reports the fenced ones, and one statement reads the stop
requests, on a thread and database connection of their own (a write stuck
behind a row lock never stops the heartbeats of the other turns; a locked
supervision row is skipped, not waited for); every ``RECORDING_FLUSH_INTERVAL``
the changed recordings are written in one transaction; checkpoints are saved
every ``CHECKPOINT_INTERVAL`` per turn.

A seal the database refuses (an outage, a lock held past
``PRODUCER_LOCK_TIMEOUT``) is logged with its ids and retried with back-off for
``SEAL_RETRY_FOR`` seconds, without heartbeats: it lands when the database
returns, or the turn is left dead for a resume or the reaper. It never stays
running silently.

Seal order: flush the recording, stop the heartbeat, write the terminal status
(the assistant message, the run, the supervision row, the conversation's
``last_turn_status`` and a ``status_idle`` event, in one fenced transaction).
A fenced producer writes nothing more.

A hand-off (:meth:`Producer.request_hand_off`, at a shutdown: see
:mod:`.shutdown`) stops the agent at its next step boundary (a tool call in
flight finishes and is checkpointed first), then writes in the same order:
the recording, the checkpoint, and the release of the turn as ``handed_off``
at epoch + 1 (:meth:`~agent_persistence.stores.turns.TurnStore.hand_off`,
one fenced transaction), and announces it (:data:`.hooks.handoff_listeners`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import itertools
import logging
import os
import socket
import threading
import time
import uuid
import weakref
from collections.abc import Iterator
from datetime import timedelta
from typing import Any, Awaitable, Callable, Coroutine

from asgiref.sync import sync_to_async
from django.db import InterfaceError, OperationalError, connections
from django.utils import timezone

from ..conf import app_settings
from ..exceptions import Fenced, NotFound
from ..stores import activity_store, checkpoint_store, interrupt_store, recording_store, supervision_store, turn_store
from ..stores.activities import activity_as_json
from ..stores.base import heal_connections
from ..stores.protocols import TurnPlan
from . import hooks
from .agents import Agent
from .handoff_writes import hand_off_together
from .host import TurnHost
from .outcomes import SEALS, Outcome, TurnSuspended
from .turn import Turn

# Outcome and SEALS are re-exported: `from agent_persistence.runtime.producer import Outcome` keeps working.

logger = logging.getLogger(__name__)


#: Database errors a producer outlives: a lost connection, a server restarting, a lock wait cut short.
TRANSIENT_ERRORS = (OperationalError, InterfaceError)


def retry_delay(attempt: int) -> float:
    """Seconds before retry ``attempt`` of a refused producer write: 0.5, 1, 2, 4, then 5."""
    return min(5.0, 0.25 * 2 ** min(attempt, 5))


def replica_id() -> str:
    return app_settings.REPLICA_ID or f"{socket.gethostname()}:{os.getpid()}"


def seal_turn(plan_scope: Any, conversation_id: uuid.UUID, *, message_id: uuid.UUID, run_id: uuid.UUID,
              epoch: int, message: dict[str, Any], outcome: Outcome, error: dict[str, str] | None = None) -> bool:
    """Write a turn's terminal status in one fenced transaction; False when fenced or gone."""
    sealed = turn_store().seal(
        plan_scope, conversation_id, message_id=message_id, run_id=run_id, epoch=epoch, message=message,
        seal=SEALS[outcome], stop_reason=outcome.value, error=error,
    )
    if not sealed:
        logger.info("Turn %s of conversation %s was fenced or deleted; it writes nothing more.", message_id, conversation_id)
    return sealed


class Producer(TurnHost):
    """Drives one run of one turn (the :class:`~.host.TurnHost` of its :class:`~.turn.Turn`); created by the
    entry points in :mod:`.lifecycle`."""

    def __init__(self, plan: TurnPlan, agent: Agent) -> None:
        self.plan = plan
        self.agent = agent
        self.conversation_id = plan.conversation_id
        self.epoch = plan.epoch
        self.index = plan.start_index
        self.recording_dirty = True
        self.publish_pending = False
        self.cancel_requested = False
        self.fenced = False
        self.stop_reason: Outcome | None = None
        self.sealing = False
        #: A hand-off waits for the tool call in flight (:meth:`step_done` cancels the agent then).
        self.stop_at_step = False
        #: True once :meth:`drive` runs (a task cancelled before it first runs would never hand off).
        self.running = False
        #: What the agent was doing when a hand-off stopped it: "model" (it waited for its model: that call is
        #: made again by the next producer) or "tool" (a tool call that outlived the grace, run again).
        self.in_flight: str | None = None
        #: The epoch the turn was released at by this producer's hand-off (None: not handed off).
        self.released_at: int | None = None
        self.started = time.monotonic()
        self.last_checkpoint = time.monotonic()
        self.task: asyncio.Task[Outcome] | None = None
        checkpoint = plan.checkpoint
        self.turn = Turn(
            host=self,
            scope=plan.scope,
            conversation_id=plan.conversation_id,
            message_id=plan.message_id,
            run_id=plan.run_id,
            transcript=plan.transcript,
            state=checkpoint.get("agent", {}),
            resumed=plan.resumed,
            text=checkpoint.get("text", ""),
            tool_calls=checkpoint.get("tool_calls"),
            tool_results=checkpoint.get("tool_results"),
            answers=plan.answers,
            subagents=checkpoint.get("subagents"),
        )

    # -- the turn's host (TurnHost) ----------------------------------------------------------------

    def message_changed(self) -> None:
        self.index += 1
        self.recording_dirty = True
        if hooks.stream_listeners and not self.publish_pending and not self.fenced:
            # One publish per loop iteration, however many chunks were streamed in it.
            self.publish_pending = True
            asyncio.get_running_loop().call_soon(self.publish)

    def publish(self) -> None:
        self.publish_pending = False
        if self.fenced:
            return
        message = self.turn.message()
        hooks.publish(hooks.StreamUpdate(
            self.conversation_id, self.plan.message_id, self.plan.run_id, self.epoch, self.index, message["content"],
            message.get("tool_calls"),
        ))

    def checkpoint(self) -> dict[str, Any]:
        return {
            "conversation_id": self.conversation_id,
            "state": self.turn.snapshot(),
            "epoch": self.epoch,
            "message_id": self.plan.message_id,
        }

    async def save_checkpoint(self) -> None:
        """Save the checkpoint now (after a tool call, before going idle, at the end)."""
        self.last_checkpoint = time.monotonic()
        checkpoint = self.checkpoint()
        conversation_id = checkpoint.pop("conversation_id")
        await self.persist("checkpoint", lambda: checkpoint_store().asave(conversation_id, **checkpoint))

    async def raise_interrupt(self, interrupt_id: uuid.UUID, *, run_id: uuid.UUID, kind: str, payload: dict[str, Any],
                              expires_in: float | None) -> Any:
        """Store the question (insert-if-absent) for ``run_id`` (this run, or a subagent's child run); the stored row."""
        expires_at = timezone.now() + timedelta(seconds=expires_in) if expires_in else None
        return await self.persist("interrupt", lambda: interrupt_store().acreate(
            self.plan.scope,
            self.conversation_id,
            id=interrupt_id,
            run_id=run_id,
            kind=kind,
            payload=payload,
            expires_at=expires_at,
            epoch=self.epoch,
        ))

    async def save_activity(self, activity: dict[str, Any]) -> None:
        """Save one activity row and send it to followers; a failure is logged, never raised.

        Activities are decoration beside the answer: one attempt, no retry
        that would hold the agent up. A fenced save stops the producer, as
        any fenced write does.
        """
        try:
            row = await activity_store().aput(self.plan.scope, self.conversation_id, activity, epoch=self.epoch)
        except Fenced:
            logger.info("Activity of turn %s was fenced; the producer stops.", self.plan.message_id)
            self.stop(Outcome.FENCED)
            return
        except Exception:  # noqa: BLE001 - a failed activity save never fails the turn
            logger.warning(
                "Saving an activity of turn %s (run %s, epoch %s) of conversation %s failed; the turn goes on.",
                self.plan.message_id, self.plan.run_id, self.epoch, self.conversation_id, exc_info=True,
            )
            return
        if not self.fenced:
            hooks.publish_activity(hooks.ActivityUpdate(self.conversation_id, self.epoch, activity_as_json(row)))

    async def persist(self, what: str, write: Callable[[], Awaitable[Any]]) -> Any:
        """A write the agent waits on, retried while the database refuses it (an outage, a lock held too long).

        Only failures of the connection or of a lock wait are retried, with
        back-off, for ``SEAL_RETRY_FOR`` seconds; then the error reaches the
        agent. A fenced write is never retried.
        """
        give_up_at = time.monotonic() + app_settings.SEAL_RETRY_FOR
        for attempt in itertools.count(1):
            try:
                return await write()
            except TRANSIENT_ERRORS:
                delay = retry_delay(attempt)
                if time.monotonic() + delay > give_up_at:
                    raise
                logger.warning(
                    "Saving the %s of turn %s (epoch %s) of conversation %s failed (attempt %s); retrying in %.1f s.",
                    what, self.plan.message_id, self.epoch, self.conversation_id, attempt, delay, exc_info=True,
                )
                await asyncio.sleep(delay)

    def step_done(self) -> None:
        if self.stop_at_step:
            self.stop_at_step = False
            if self.task is not None and not self.task.done() and not self.sealing:
                self.task.cancel()  # at the agent's next await: its tool call is recorded and checkpointed

    # -- called by the supervisor ------------------------------------------------------------

    def recording(self) -> dict[str, Any]:
        return {
            "conversation_id": self.conversation_id,
            "message_id": self.plan.message_id,
            "index": self.index,
            "message": self.turn.message(),
            "epoch": self.epoch,
        }

    def stop(self, reason: Outcome) -> None:
        """Stop the agent at its next ``await``; ``reason`` decides what the seal writes.

        Only the first stop cancels the task, and never once it is sealing: a
        seal is not interrupted halfway (a fenced seal is refused by the
        database anyway).
        """
        if reason is Outcome.FENCED:
            self.fenced = True
        if reason is Outcome.CANCELLED:
            self.cancel_requested = True
        if self.sealing:
            return
        if self.stop_reason is not None:
            if reason is Outcome.FENCED or self.stop_reason is Outcome.HANDED_OFF:
                # A fence, or the turn's own stop (a cancel, the run time) while a hand-off waits: it wins.
                self.stop_reason = reason
                if self.stop_at_step and self.task is not None and not self.task.done():
                    self.stop_at_step = False
                    self.task.cancel()
            return
        self.stop_reason = reason
        if self.task is not None and not self.task.done():
            self.task.cancel()

    def request_hand_off(self, *, force: bool = False) -> None:
        """Stop the agent for a hand-off (this process shuts down): at once, or once its tool call in flight is done.

        ``force`` stops it even inside a tool call (the call is then made again by the next producer).
        A producer already stopping for another reason (a cancel, a fence), or sealing, is left to it.
        """
        if self.sealing or self.task is None or self.task.done():
            return
        if self.stop_reason is None:
            self.stop_reason = Outcome.HANDED_OFF
        elif self.stop_reason is not Outcome.HANDED_OFF:
            return
        if not self.running:
            return  # drive() sees the stop before it runs the agent
        if self.turn.tools_running and not force:
            self.stop_at_step = True
            return
        self.stop_at_step = False
        self.in_flight = "tool" if self.turn.tools_running else "model"
        self.task.cancel()

    # -- the run -----------------------------------------------------------------------------

    async def drive(self) -> Outcome:
        """Run the agent to an outcome and seal it; ``launch()`` registered the producer already."""
        supervisor = Supervisor.current()
        supervisor.add(self)
        self.running = True
        try:
            while True:
                if self.stop_reason is Outcome.HANDED_OFF:  # asked before the agent ran: nothing is in flight
                    outcome, error = Outcome.HANDED_OFF, None
                    break
                outcome, error = await self._run_agent()
                if self.fenced:
                    outcome = Outcome.FENCED
                if outcome is not Outcome.INTERRUPTED or await self._suspend():
                    break
                # Every question was answered before the run could go idle: go on at once.
                self.turn.receive_answers(await turn_store().aanswers(self.conversation_id, self.plan.message_id))
            if outcome is not Outcome.INTERRUPTED:
                self.sealing = True
                await self._seal(outcome, error)
        finally:
            supervisor.remove(self)
        if self.sealing:
            # The seal's layer message waits on this loop's sender: the turn is over once it has left, so a
            # process that ends with its turns (a command, a script under asyncio.run) does not lose it.
            await hooks.flush_announcements()
        return outcome

    async def _run_agent(self) -> tuple[Outcome, dict[str, str] | None]:
        try:
            await self.agent.run(self.turn)
        except TurnSuspended:
            return Outcome.INTERRUPTED, None
        except asyncio.CancelledError:
            outcome = self.stop_reason or Outcome.ABANDONED
            if outcome is Outcome.ERRORED:
                return outcome, {"code": "max_run_time", "message": "The turn ran longer than MAX_RUN_TIME."}
            return outcome, None
        except Fenced:
            return Outcome.FENCED, None
        except Exception as exc:  # noqa: BLE001 - an agent's failure ends its turn as errored
            logger.exception("Agent %r failed in conversation %s", self.agent.name, self.conversation_id)
            return Outcome.ERRORED, {"code": "agent_error", "message": f"{type(exc).__name__}: {exc}"[:1000]}
        return Outcome.COMPLETED, None

    async def _suspend(self) -> bool:
        """Go idle until the pending interrupts are answered; False when they already are."""
        self.sealing = True
        try:
            await recording_store().aput(**self.recording())
            self.recording_dirty = False
            await self.save_checkpoint()
            suspended = await sync_to_async(self._seal_interrupted)()
        except (Fenced, NotFound):
            self.fenced = True
            return True
        self.sealing = suspended
        return suspended

    async def _seal(self, outcome: Outcome, error: dict[str, str] | None) -> None:
        supervisor = Supervisor.current()
        if outcome is Outcome.HANDED_OFF:
            await self._hand_off()
            return
        if outcome in (Outcome.FENCED, Outcome.ABANDONED):
            return
        give_up_at = time.monotonic() + app_settings.SEAL_RETRY_FOR
        for attempt in itertools.count(1):
            try:
                # 1. flush the recording, 2. stop the heartbeat, 3. write the terminal status.
                await recording_store().aput(**self.recording())
                self.recording_dirty = False
                supervisor.remove(self)
                await self.save_checkpoint()
                await sync_to_async(seal_turn)(
                    self.plan.scope,
                    self.conversation_id,
                    message_id=self.plan.message_id,
                    run_id=self.plan.run_id,
                    epoch=self.epoch,
                    message=self.turn.message(),
                    outcome=outcome,
                    error=error,
                )
                return
            except (Fenced, NotFound):
                logger.info("Producer of conversation %s was fenced while sealing.", self.conversation_id)
                return
            except TRANSIENT_ERRORS:
                supervisor.remove(self)  # no heartbeat while the seal waits: the turn reads dead to everyone else
                delay = retry_delay(attempt)
                if time.monotonic() + delay > give_up_at:
                    logger.error(
                        "Could not seal turn %s (run %s, epoch %s) of conversation %s after %s attempts; it is left "
                        "dead for a resume or the reaper.", self.plan.message_id, self.plan.run_id, self.epoch,
                        self.conversation_id, attempt, exc_info=True,
                    )
                    return
                logger.warning(
                    "Sealing turn %s (run %s, epoch %s) of conversation %s failed (attempt %s); retrying in %.1f s.",
                    self.plan.message_id, self.plan.run_id, self.epoch, self.conversation_id, attempt, delay,
                    exc_info=True,
                )
                await asyncio.sleep(delay)

    async def _hand_off(self) -> None:
        """Flush the recording, save the checkpoint and release the turn at epoch + 1; announce it (batched).

        One attempt each, without the seal's retries: the process is going away. A write the
        database refuses leaves the turn running with no heartbeat, so it reads dead after
        ``DEAD_AFTER`` and is taken over as after a crash.
        """
        supervisor = Supervisor.current()
        plan = self.plan
        try:
            self.recording_dirty = False
            supervisor.remove(self)
            self.last_checkpoint = time.monotonic()
            # With the other turns of this loop stopped at once: one database call for them all.
            self.released_at = await hand_off_together(self)
        except (Fenced, NotFound):
            self.fenced = True
            logger.info("Producer of conversation %s was fenced while handing off.", self.conversation_id)
            return
        except Exception:  # noqa: BLE001 - the database refused: the turn is taken over as after a crash
            supervisor.remove(self)
            logger.warning(
                "Could not hand off turn %s (run %s, epoch %s) of conversation %s; it reads dead after DEAD_AFTER.",
                plan.message_id, plan.run_id, self.epoch, self.conversation_id, exc_info=True,
            )
            return
        if self.released_at is None:
            self.fenced = True
            return
        if self.in_flight is not None:
            logger.warning(
                "Turn %s of conversation %s was handed off with a %s call in flight; the next producer makes it again.",
                plan.message_id, self.conversation_id, self.in_flight,
            )
        hooks.publish_handoff(hooks.HandOff(
            self.conversation_id, plan.message_id, plan.run_id, self.epoch, self.released_at,
        ))

    def _seal_interrupted(self) -> bool:
        """Record the run as interrupted and release the conversation, unless every question is answered.

        The store does it under the supervision row's lock, as answering does,
        so an answer lands either before this check (the run goes on) or after
        the run is recorded as interrupted (the answer starts a continuation).
        """
        plan = self.plan
        return turn_store().suspend(
            plan.scope, plan.conversation_id, message_id=plan.message_id, run_id=plan.run_id, epoch=self.epoch
        )


#: Seconds a drain waits for its stopped producers to write their hand-off, after the grace.
HAND_OFF_TIMEOUT = 5.0
#: Seconds between looks at the claims in flight while a drain waits for them.
CLAIM_POLL = 0.02

# Claims in flight: a start, continuation or resume that passed the refusal and whose transaction may
# commit (claiming a turn for this process) before its producer is registered. A drain waits for them,
# so a turn claimed while SIGTERM arrives is handed off, not left without a producer until DEAD_AFTER.
_claims_lock = threading.Lock()
_claims_in_flight = 0


@contextlib.contextmanager
def claiming() -> Iterator[None]:
    """Around a transition that claims a turn and launches its producer (``runtime.lifecycle``'s entry points)."""
    global _claims_in_flight
    with _claims_lock:
        _claims_in_flight += 1
    try:
        yield
    finally:
        with _claims_lock:
            _claims_in_flight -= 1


def claims_in_flight() -> int:
    """How many turn claims of this process have not launched their producer yet."""
    return _claims_in_flight


class DrainReport:
    """What a drain did: turns handed off, model and tool calls they had in flight, turns left to the reaper."""

    def __init__(self) -> None:
        self.handed_off = 0
        #: Handed-off turns whose agent waited for its model: that call is made again (paid twice).
        self.model_calls_in_flight = 0
        #: Handed-off turns stopped inside a tool call that outlived the second grace: that call runs again.
        self.tool_calls_in_flight = 0
        #: Turns that could not be handed off (fenced, a database error, stuck): a reaper takes them over.
        self.left = 0

    def count(self, producer: Producer) -> None:
        if producer.released_at is not None:
            self.handed_off += 1
            self.model_calls_in_flight += producer.in_flight == "model"
            self.tool_calls_in_flight += producer.in_flight == "tool"
        elif producer.stop_reason is Outcome.HANDED_OFF:
            self.left += 1

    def add(self, other: "DrainReport") -> None:
        for name in ("handed_off", "model_calls_in_flight", "tool_calls_in_flight", "left"):
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in ("handed_off", "model_calls_in_flight", "tool_calls_in_flight", "left")}


def _beat(entries: list[tuple[uuid.UUID, int]], run_ids: list[uuid.UUID]) -> tuple[set[uuid.UUID], set[uuid.UUID]]:
    """One heartbeat of a process's turns, on the heartbeat thread: the fenced ones, and those asked to stop."""
    heal_connections()
    return supervision_store().heartbeat_many(entries), turn_store().stop_requested(run_ids)


class Supervisor:
    """The producers of this process on one event loop, and the ticker that serves them all."""

    _by_loop: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Supervisor]" = weakref.WeakKeyDictionary()

    def __init__(self) -> None:
        self.producers: dict[uuid.UUID, Producer] = {}
        self._ticker: asyncio.Task[None] | None = None
        self._beater: asyncio.Task[None] | None = None
        self._reaper: asyncio.Task[None] | None = None
        # Heartbeats have a thread (and so a database connection) of their own while turns run: a producer
        # write stuck behind a lock on the shared producer thread never delays the heartbeats of the other turns.
        self._heartbeat_thread: concurrent.futures.ThreadPoolExecutor | None = None

    @classmethod
    def current(cls) -> "Supervisor":
        loop = asyncio.get_running_loop()
        supervisor = cls._by_loop.get(loop)
        if supervisor is None:
            supervisor = cls._by_loop[loop] = cls()
        return supervisor

    def start_reaper(self, reaper: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run ``reaper()`` on this loop, once (the lifecycle module passes its sweep)."""
        if self._reaper is None or self._reaper.done():
            self._reaper = asyncio.get_running_loop().create_task(reaper(), name="agent_persistence.reaper")

    def stop_reaper(self) -> None:
        """Stop this loop's reaper (and its companions): a draining process takes no turn."""
        if self._reaper is not None and not self._reaper.done():
            self._reaper.cancel()

    async def drain(self, grace: float) -> "DrainReport":
        """Let this loop's turns run for ``grace`` seconds, then hand off those still running.

        A turn that ends meanwhile is sealed as usual. The others are stopped at their next step
        boundary (a tool call in flight finishes first, for at most another ``grace``; then it is
        stopped too) and handed off. Returns what happened to each.
        """
        report = DrainReport()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        while True:  # a turn may start meanwhile (claimed before the refusal): it is drained too
            running = [p.task for p in self.producers.values() if p.task is not None and not p.task.done()]
            remaining = deadline - loop.time()
            if not running or remaining <= 0:
                break
            await asyncio.wait(running, timeout=remaining)
        drained = list(self.producers.values())
        for producer in drained:
            producer.request_hand_off()
        await self._wait(drained, grace)
        for producer in drained:
            producer.request_hand_off(force=True)
        await self._wait(drained, HAND_OFF_TIMEOUT)
        for producer in drained:
            report.count(producer)
        return report

    @staticmethod
    async def _wait(producers: list[Producer], timeout: float) -> None:
        tasks = [p.task for p in producers if p.task is not None and not p.task.done()]
        if tasks and timeout > 0:
            await asyncio.wait(tasks, timeout=timeout)

    def get(self, conversation_id: uuid.UUID) -> Producer | None:
        return self.producers.get(conversation_id)

    def add(self, producer: Producer) -> None:
        self.producers[producer.conversation_id] = producer
        loop = asyncio.get_running_loop()
        if self._ticker is None or self._ticker.done():
            self._ticker = loop.create_task(self._tick_forever(), name="agent_persistence.supervisor")
        if self._beater is None or self._beater.done():
            self._heartbeat_thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="agent_persistence.heartbeat")
            self._beater = loop.create_task(self._beat_forever(self._heartbeat_thread), name="agent_persistence.heartbeat")

    def remove(self, producer: Producer) -> None:
        if self.producers.get(producer.conversation_id) is producer:
            del self.producers[producer.conversation_id]

    async def _tick_forever(self) -> None:
        while self.producers:
            await asyncio.sleep(app_settings.RECORDING_FLUSH_INTERVAL)
            try:
                await self.flush_recordings()
                await self.checkpoint_due()
                self.enforce_max_run_time()
            except Exception:  # noqa: BLE001 - a failed tick (database down) must not kill the ticker
                logger.exception("Supervisor tick failed; retrying next tick.")

    async def _beat_forever(self, thread: concurrent.futures.ThreadPoolExecutor) -> None:
        try:
            while self.producers:
                await asyncio.sleep(app_settings.HEARTBEAT_INTERVAL)
                try:
                    await self.heartbeat(thread)
                except Exception:  # noqa: BLE001 - a failed heartbeat (database down) must not stop the next one
                    logger.exception("Heartbeat failed; retrying next interval.")
        finally:
            # Nothing left to beat for: the heartbeat thread gives its connection back and ends.
            try:
                await asyncio.get_running_loop().run_in_executor(thread, connections.close_all)
            finally:
                thread.shutdown(wait=False)

    async def heartbeat(self, thread: concurrent.futures.Executor | None = None) -> None:
        """Stamp every live turn's heartbeat (on ``thread``, the heartbeat thread, when given) and act on the answer."""
        producers = list(self.producers.values())
        if not producers:
            return
        beat = functools.partial(
            _beat, [(p.conversation_id, p.epoch) for p in producers], [p.plan.run_id for p in producers]
        )
        fenced, stopping = await asyncio.get_running_loop().run_in_executor(thread, beat)
        for producer in producers:
            if producer.conversation_id in fenced:
                logger.warning("Conversation %s is held by a newer epoch; its producer stops.", producer.conversation_id)
                producer.stop(Outcome.FENCED)
            elif producer.plan.run_id in stopping:
                producer.stop(Outcome.CANCELLED)

    async def flush_recordings(self) -> None:
        dirty = [p for p in self.producers.values() if p.recording_dirty]
        if not dirty:
            return
        for producer in dirty:
            producer.recording_dirty = False
        try:
            fenced = await recording_store().aput_many([p.recording() for p in dirty])
        except Exception:
            for producer in dirty:
                producer.recording_dirty = True  # written on the next tick instead
            raise
        for producer in dirty:
            if producer.conversation_id in fenced:
                producer.stop(Outcome.FENCED)

    async def checkpoint_due(self) -> None:
        """Save every checkpoint that is due in one transaction (one fence, one upsert)."""
        now = time.monotonic()
        due = [p for p in self.producers.values() if now - p.last_checkpoint >= app_settings.CHECKPOINT_INTERVAL]
        if not due:
            return
        for producer in due:
            producer.last_checkpoint = now
        unsaved = await checkpoint_store().asave_many([p.checkpoint() for p in due])
        for producer in due:
            if producer.conversation_id in unsaved:
                producer.stop(Outcome.FENCED)

    def enforce_max_run_time(self) -> None:
        now = time.monotonic()
        for producer in list(self.producers.values()):
            if now - producer.started > app_settings.MAX_RUN_TIME:
                producer.stop(Outcome.ERRORED)
