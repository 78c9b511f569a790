"""The turn lifecycle's entry points: start, continue after interrupts, resume after a crash, cancel, reap.

Each asks the turn store (:mod:`agent_persistence.stores.turns`) for its
transition, which is one transaction (so a refusal changes nothing), then
launches a :class:`~.producer.Producer` as an asyncio task on the running
event loop and returns a :class:`TurnHandle` at once. Await ``handle.task``
to wait for the outcome. With ``TURN_RUNNER = "tasks"`` the transition is the
same (claimed for the replica ``queued``) but the run is enqueued for a worker
once it has committed (:mod:`.workers`); ``handle.queued`` is then True and
``handle.task`` ends once the run is enqueued (the entry points await it). This module opens no transaction and touches no
model: every write is a store call.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from dataclasses import dataclass
from typing import Any

from asgiref.sync import sync_to_async
from django.core.exceptions import ImproperlyConfigured
from django.db import connections

from ..conf import app_settings
from ..exceptions import Busy, Conflict, ConversationNotOwned, ShuttingDown
from ..scope import Scope
from ..statuses import QUEUED_REPLICA, TurnState
from ..stores import conversation_store, lease_store, run_store, supervision_store, turn_store
from ..stores.protocols import Continuation, TurnPlan
from ..stores.rules.leases import HOLDER_MAX_LENGTH
from ..stores.rules.turns import PRODUCER_LOST  # the error a turn closed out after its producer died carries
from . import hooks
from .agents import get_agent
from .outcomes import SEALS, Outcome
from .producer import Producer, Supervisor, claiming, replica_id
from .shutdown import is_draining, refuse_if_draining

logger = logging.getLogger(__name__)


@dataclass
class TurnHandle:
    conversation_id: uuid.UUID
    message_id: uuid.UUID
    run_id: uuid.UUID
    epoch: int
    resumed: bool
    task: "asyncio.Task[Outcome]"
    #: Answering took over a turn whose producer had died (and resumed it here).
    took_over: bool = False
    #: ``TURN_RUNNER = "tasks"``: the run is enqueued for a worker (``task`` ends once it is, not with the turn).
    queued: bool = False


def runs_on_workers() -> bool:
    """Whether producers run on a worker tier (``TURN_RUNNER = "tasks"``) rather than in the accepting process."""
    return app_settings.TURN_RUNNER == "tasks"


def claimant() -> str:
    """The replica a transition claims the turn for: this process, or ``queued`` for a worker to take."""
    return QUEUED_REPLICA if runs_on_workers() else replica_id()


_drives_in = 0  # the process id of a task worker (TURN_RUNNER "tasks"): it drives what it claims itself


def drive_claims_here() -> None:
    """Say this process is a task worker (its first task, or its start): a hand-off it claims runs here."""
    global _drives_in
    _drives_in = os.getpid()


def drives_turns() -> bool:
    """Whether this process runs producers: with the in-process runner any, with ``"tasks"`` a worker."""
    return not runs_on_workers() or _drives_in == os.getpid()


def supervisor() -> Supervisor:
    """The running loop's supervisor, with the in-process reaper started when ``REAPER_ENABLED``."""
    current = Supervisor.current()
    if app_settings.REAPER_ENABLED:
        current.start_reaper(reap_forever)
    return current


_reaper_started_in = 0  # the process id whose producer loop runs the reaper (forked workers start their own)


def ensure_reaper() -> bool:
    """With ``REAPER_ENABLED``, start the in-process reaper on this process's producer loop, once.

    Called when the process serves its first HTTP request (``request_started``, WSGI or ASGI) and
    its first websocket follower, so a replica reaps whatever it serves, not only once it starts a
    turn of its own. Cheap and idempotent; returns whether a reaper runs (was started) in this process.
    """
    global _reaper_started_in
    if not app_settings.REAPER_ENABLED:
        return False
    if _reaper_started_in == os.getpid():
        return True
    _reaper_started_in = os.getpid()
    from .loop import submit

    async def start() -> None:
        supervisor()

    submit(start())
    return True


def on_request_started(sender: Any, **kwargs: Any) -> None:
    """``request_started`` receiver (connected in ``AppConfig.ready``): start the reaper with the process."""
    try:
        ensure_reaper()
    except Exception:  # noqa: BLE001 - a request never fails for the reaper; the next one tries again
        global _reaper_started_in
        _reaper_started_in = 0
        logger.exception("Could not start the reaper.")


# -- start -------------------------------------------------------------------------------------


def begin_turn(scope: Scope, conversation_id: Any, *, content: Any, agent: str | None = None,
               message_id: Any = None, user_message_id: Any = None, metadata: dict[str, Any] | None = None) -> TurnPlan:
    """Store the user message, claim the conversation and create the run, in one transaction.

    Refusals (PendingInterrupts, Busy, Validation, ...) roll everything back; ShuttingDown (503)
    while this process drains, before anything is written.
    """
    refuse_if_draining()
    return turn_store().begin(
        scope, conversation_id, content=content, known_agents=app_settings.AGENTS, agent=agent,
        message_id=message_id, user_message_id=user_message_id, metadata=metadata, replica=claimant(),
    )


def launch(plan: TurnPlan, *, took_over: bool = False) -> TurnHandle:
    """Drive ``plan`` as an asyncio task on the running loop; with ``TURN_RUNNER = "tasks"``, enqueue it for a worker."""
    if runs_on_workers():
        if hooks.run_enqueuer is None:
            raise ImproperlyConfigured('TURN_RUNNER is "tasks" but agent_persistence.runtime.workers was not imported '
                                       '(pip install "agent-persistence[tasks]"; AppConfig.ready imports it).')
        enqueued = asyncio.get_running_loop().create_task(hooks.run_enqueuer(plan),
                                                          name=f"agent_persistence.enqueue.{plan.message_id}")
        return TurnHandle(plan.conversation_id, plan.message_id, plan.run_id, plan.epoch, plan.resumed,
                          enqueued, took_over, queued=True)
    return launch_here(plan, took_over=took_over)


async def enqueued(handle: TurnHandle) -> TurnHandle:
    """``handle``, once its run is enqueued when it runs on a worker (at once otherwise)."""
    if handle.queued:
        await handle.task
    return handle


def launch_here(plan: TurnPlan, *, took_over: bool = False) -> TurnHandle:
    """Drive ``plan`` as an asyncio task on the running loop, in this process (a worker's task calls it too)."""
    producer = Producer(plan, get_agent(plan.agent_name))
    task = asyncio.get_running_loop().create_task(producer.drive(), name=f"agent_persistence.turn.{plan.message_id}")
    producer.task = task
    supervisor().add(producer)  # visible (heartbeat, stop) before the task first runs
    return TurnHandle(plan.conversation_id, plan.message_id, plan.run_id, plan.epoch, plan.resumed, task, took_over)


async def start_turn(scope: Scope, conversation_id: Any, *, content: Any, agent: str | None = None,
                     message_id: Any = None, user_message_id: Any = None,
                     metadata: dict[str, Any] | None = None) -> TurnHandle:
    """Start a turn: the conversation is created on its first user message."""
    with claiming():  # a drain that begins meanwhile waits for this turn's producer, and hands it off
        plan = await sync_to_async(begin_turn)(
            scope, conversation_id, content=content, agent=agent, message_id=message_id,
            user_message_id=user_message_id, metadata=metadata,
        )
        return await enqueued(launch(plan))


# -- continue after interrupts -------------------------------------------------------------------


def begin_continuation(scope: Scope, conversation_id: Any, answers: list[dict[str, Any]], *,
                       resolved_by: str | None = None) -> Continuation:
    """Commit the answers (all or nothing) and, when they release the turn, claim its next run, atomically.

    An interrupted run gets a continuation run; a turn whose producer died
    before it could go idle is taken over; a live producer sees the answers
    itself. A repeated identical batch returns the first outcome and starts nothing. ShuttingDown
    (503, nothing stored) while this process drains.
    """
    refuse_if_draining()
    return turn_store().continue_after_answers(scope, conversation_id, answers, resolved_by=resolved_by,
                                               replica=claimant())


async def continue_turn(scope: Scope, conversation_id: Any, answers: list[dict[str, Any]], *,
                        resolved_by: str | None = None) -> tuple[list[Any], TurnHandle | None]:
    with claiming():
        continuation = await sync_to_async(begin_continuation)(scope, conversation_id, answers, resolved_by=resolved_by)
        handle = launch(continuation.plan, took_over=continuation.took_over) if continuation.plan is not None else None
        return continuation.interrupts, handle and await enqueued(handle)


# -- resume after a crash ---------------------------------------------------------------------------


def begin_resume(scope: Scope, conversation_id: Any, *, message_id: Any = None) -> TurnPlan:
    """Claim a dead producer's turn at epoch + 1 for a new run; its open runs are recorded as lost.

    A live turn is Busy (409); a finished one, or none, is Gone (410); ShuttingDown (503) while this
    process drains. A handed-off turn is claimed at once.
    """
    refuse_if_draining()
    return turn_store().resume(scope, conversation_id, message_id=message_id, replica=claimant())


async def resume_turn(scope: Scope, conversation_id: Any, *, message_id: Any = None) -> TurnHandle:
    with claiming():
        plan = await sync_to_async(begin_resume)(scope, conversation_id, message_id=message_id)
        return await enqueued(launch(plan))


# -- stop ---------------------------------------------------------------------------------------------


def request_stop(scope: Scope, conversation_id: Any) -> Any:
    """Flag the active run of the conversation for a stop; its producer (on any process) sees it within one heartbeat."""
    run = run_store().find_active_run(scope, conversation_id)
    if run is None:
        if conversation_store().get(scope, conversation_id).owner != scope.user:
            raise ConversationNotOwned()
        raise Conflict("No turn is running in this conversation.", code="no_turn_running")
    return run_store().request_cancel(scope, run.pk)


async def cancel_turn(scope: Scope, conversation_id: Any) -> Any:
    """Stop the conversation's turn: it ends as cancelled and keeps its partial answer.

    The local producer stops at once; one in another process at its next
    heartbeat; a dead producer's turn is closed out here.
    """
    run = await sync_to_async(request_stop)(scope, conversation_id)
    producer = supervisor().get(run.conversation_id)
    if producer is not None:
        producer.stop(Outcome.CANCELLED)
        return run
    status = await supervision_store().astatus(scope, run.conversation_id)
    if status.state in (TurnState.DEAD, TurnState.HANDING_OFF):
        await sync_to_async(close_out_dead_turn)(scope, run.conversation_id, Outcome.CANCELLED)
        # The seal's layer message is queued on this loop: see it sent before a caller's loop can end.
        await hooks.flush_announcements()
    return run


# -- dead turns ------------------------------------------------------------------------------------------


def close_out_dead_turn(scope: Scope, conversation_id: uuid.UUID, outcome: Outcome = Outcome.ERRORED) -> bool:
    """End a dead producer's turn here, with the partial answer of its recording, without re-driving it."""
    return turn_store().close_out(
        scope,
        conversation_id,
        seal=SEALS[outcome],
        stop_reason=outcome.value,
        error=PRODUCER_LOST if outcome is Outcome.ERRORED else None,
        replica=replica_id(),
    )


def force_release(conversation_id: uuid.UUID) -> bool:
    """Operator action: end the conversation's running turn as errored and fence its producer.

    The supervision row becomes errored at a raised epoch (the producer's next
    write is refused), the turn's open runs are aborted (``force_released``)
    and the conversation reads ``errored``. False when no turn was running.
    """
    return turn_store().force_release(conversation_id)


def stop_turn_now(conversation_id: uuid.UUID) -> Any:
    """Operator action: stop the conversation's turn as its owner would, from any process.

    A live producer sees the stop within one heartbeat; a dead producer's turn
    is closed out here as cancelled with its partial answer.
    """
    scope = turn_store().scope_of(conversation_id)
    run = request_stop(scope, conversation_id)
    if supervision_store().status(scope, conversation_id).state in (TurnState.DEAD, TurnState.HANDING_OFF):
        close_out_dead_turn(scope, run.conversation_id, Outcome.CANCELLED)
    return run


#: The error of a turn the reaper closed out because its resumes kept failing (``MAX_RESUME_ATTEMPTS``).
RESUME_ATTEMPTS_EXHAUSTED = "resume_attempts_exhausted"


def failed_resumes(scope: Scope, conversation_id: uuid.UUID, message_id: uuid.UUID) -> int:
    """Resumes of the turn that ended without a seal, counted from its runs (no column of its own).

    Every takeover of a dead turn records the run it took over as aborted with ``producer_lost``; the
    first such run is the original producer's death, each later one a resumed producer's (it died,
    or its seal failed and it stopped). The turn's run open now is dead too (the caller found it so).
    """
    runs = run_store().list(scope, conversation_id, message_id=message_id, limit=100).items
    lost = sum(
        1 for run in runs
        if getattr(run, "parent_id", None) is None and (run.error or {}).get("code") == PRODUCER_LOST["code"]
    )
    return lost


def close_out_exhausted(scope: Scope, conversation_id: uuid.UUID, failures: int) -> bool:
    """End a turn whose resumes kept failing as errored, with its partial answer and the reason.

    The reason is the run's error (``resume_attempts_exhausted``, shown in the admin and by the API)
    and a warning in the log. When even the close-out cannot store the answer, the turn is force
    released (fenced, its runs aborted) so it is never resumed again.
    """
    limit = app_settings.MAX_RESUME_ATTEMPTS
    error = {
        "code": RESUME_ATTEMPTS_EXHAUSTED,
        "message": f"The turn was resumed {failures} times and each resume ended without a seal "
                   f"(MAX_RESUME_ATTEMPTS is {limit}); it was closed out with its partial answer.",
    }
    logger.warning(
        "The turn of conversation %s failed %d resumes (MAX_RESUME_ATTEMPTS %d): closing it out as errored.",
        conversation_id, failures, limit,
    )
    try:
        return turn_store().close_out(
            scope, conversation_id, seal=SEALS[Outcome.ERRORED], stop_reason=Outcome.ERRORED.value, error=error,
            replica=replica_id(),
        )
    except Busy:
        raise
    except Exception:  # noqa: BLE001 - the answer itself cannot be stored: stop the turn anyway
        logger.warning("Closing out the turn of conversation %s failed; force releasing it.", conversation_id, exc_info=True)
        return turn_store().force_release(conversation_id, error=error)


#: The fleet-wide sweep lease: one sweep of dead turns at a time across every process that reaps. Its
#: tenant is the app's own, reserved (the lease store takes any tenant string, so the reservation is
#: documented, not enforced): a host's leases live in its scopes' tenants ("" by default) and the app's
#: other leases (MCP token refreshes, ``mcp-refresh:...``) in their users' tenants.
REAPER_LEASE_TENANT = "agent_persistence"
REAPER_LEASE_KEY = "reaper:sweep"

#: Seconds between two tries of a one-shot sweep that waits for the lease (``reap_turns`` without ``--loop``).
SWEEP_LEASE_POLL = 0.2


def reaper_lease_ttl() -> float:
    """``REAPER_LEASE_TTL``, or twice ``REAPER_INTERVAL``: how long the fleet is without sweeps after a sweeper dies."""
    configured = app_settings.REAPER_LEASE_TTL
    return float(configured) if configured is not None else 2.0 * float(app_settings.REAPER_INTERVAL)


class SweepLease:
    """The fleet-wide lease one sweep holds: taken before it, re-taken between turns, released after.

    The holder is this process's replica id and a token of the sweep (``web-1:4242/3f2a...``), so two
    sweeps of one process (threads, a command beside the in-process reaper, replicas configured with
    one ``REPLICA_ID``) are two holders as well, and a sweep releases only its own lease. The ttl
    bounds one turn's handling, not the whole sweep: a sweep that finds the lease taken over between
    two turns stops there.
    """

    def __init__(self) -> None:
        token = uuid.uuid4().hex[:12]
        self.holder = f"{replica_id()[: HOLDER_MAX_LENGTH - len(token) - 1]}/{token}"
        self.ttl = reaper_lease_ttl()
        #: The holder of the lease when this sweep could not take it.
        self.held_by: str | None = None
        self._taken_at = 0.0

    async def take(self) -> bool:
        """Take the lease (free, expired, or this sweep's already); False, with ``held_by``, when another holds it."""
        result = await lease_store().aacquire(REAPER_LEASE_TENANT, REAPER_LEASE_KEY, self.holder, ttl=self.ttl)
        if not result.acquired:
            self.held_by = result.lease.holder
            return False
        if result.taken_over and result.previous_holder != self.holder:
            logger.info("Took over the sweep lease of %s, which lapsed (its sweep died or stalled).", result.previous_holder)
        self._taken_at = time.monotonic()
        return True

    async def acquire(self, *, wait: float = 0.0) -> bool:
        """Take the lease, trying again for up to ``wait`` seconds while another sweep holds it."""
        deadline = time.monotonic() + wait
        while not await self.take():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            await asyncio.sleep(min(SWEEP_LEASE_POLL, remaining))
        return True

    async def keep(self) -> bool:
        """Between two turns: re-take the lease once half its ttl has passed; False when another sweep has it now."""
        if time.monotonic() - self._taken_at < self.ttl / 2:
            return True
        return await self.take()

    async def release(self) -> None:
        """Free the lease for the fleet's next sweep; a failure (a database outage) leaves it to expire."""
        try:
            await lease_store().arelease(REAPER_LEASE_TENANT, REAPER_LEASE_KEY, self.holder)
        except Exception:  # noqa: BLE001 - the sweep's own outcome stands; the lease lapses after its ttl
            logger.warning("Could not release the sweep lease %s; it lapses within %s s.", self.holder, self.ttl, exc_info=True)


async def reap_dead_turns(*, resume: bool, limit: int = 100, wait: float = 0.0, force: bool = False,
                          lease: SweepLease | None = None) -> list[uuid.UUID] | None:
    """Resume (in this process) or close out every turn whose producer is dead; returns their conversations.

    One sweep at a time across the fleet: the sweep holds the fleet-wide :class:`SweepLease` (``lease``,
    a new one by default), and returns None, having done nothing, when another process's sweep holds
    it (after trying for up to ``wait`` seconds; ``lease.held_by`` names that sweep). ``force`` sweeps
    without the lease (claims are fenced: two sweeps at once only do work twice). A turn whose resumes
    have failed ``MAX_RESUME_ATTEMPTS`` times is closed out as errored (``resume_attempts_exhausted``)
    instead of resumed again, so no turn makes a reaper loop.
    """
    if resume and is_draining():
        return []  # a shutting-down process takes no turn
    if force:
        return await _sweep(resume=resume, limit=limit, lease=None)
    lease = lease or SweepLease()
    if not await lease.acquire(wait=wait):
        logger.debug("Skipping this sweep of dead turns: %s is sweeping (it holds the sweep lease).", lease.held_by)
        return None
    try:
        return await _sweep(resume=resume, limit=limit, lease=lease)
    finally:
        await lease.release()


async def _sweep(*, resume: bool, limit: int, lease: SweepLease | None) -> list[uuid.UUID]:
    """The sweep itself, under ``lease`` (None: forced, without one)."""
    holder = f"{replica_id()}/{uuid.uuid4().hex[:12]} (forced, without the lease)" if lease is None else lease.holder
    logger.debug("Sweep of dead turns started by %s.", holder)
    handled: list[uuid.UUID] = []
    try:
        dead = await turn_store().adead_turns(limit=limit)
        closed_out = not resume
        for scope, conversation_id, message_id in dead:
            if lease is not None and not await lease.keep():
                logger.info("The sweep lease passed to %s; this sweep stops (%d turn(s) left to it).",
                            lease.held_by, len(dead) - len(handled))
                break
            try:
                failures = await sync_to_async(failed_resumes)(scope, conversation_id, message_id) if resume else 0
                if resume and failures >= app_settings.MAX_RESUME_ATTEMPTS:
                    await sync_to_async(close_out_exhausted)(scope, conversation_id, failures)
                    closed_out = True
                elif resume:
                    await resume_turn(scope, conversation_id, message_id=message_id)
                else:
                    await sync_to_async(close_out_dead_turn)(scope, conversation_id)
            except Exception:  # noqa: BLE001 - another reaper may have taken it; go on with the rest
                logger.info("Could not reap the turn of conversation %s", conversation_id, exc_info=True)
                continue
            handled.append(conversation_id)
        if handled and closed_out:
            # The close-outs' seals are queued on this loop's sender: a one-shot command's loop ends next.
            await hooks.flush_announcements()
        return handled
    finally:
        logger.debug("Sweep of dead turns ended by %s: %d turn(s) handled.", holder, len(handled))


async def reap_forever() -> None:
    """The in-process reaper (``REAPER_ENABLED``): resume dead turns here every ``REAPER_INTERVAL``.

    Each sweep takes the fleet-wide sweep lease first and is skipped while another process sweeps
    (:func:`reap_dead_turns`). Its companions (:data:`.hooks.reaper_companions`, e.g. the realtime
    layer's listener that claims the turns other processes hand off) run beside it, on its loop,
    outside the lease (their claims are fenced), and stop with it.
    """
    companions = [asyncio.get_running_loop().create_task(companion(), name="agent_persistence.reaper.companion")
                  for companion in hooks.reaper_companions]
    try:
        while True:
            await asyncio.sleep(app_settings.REAPER_INTERVAL)
            if not app_settings.REAPER_ENABLED:
                continue  # turned off since it started (settings overridden at run time, e.g. in tests)
            try:
                await reap_dead_turns(resume=True)
            except Exception:  # noqa: BLE001 - keep sweeping through a database outage (the lease's too)
                logger.exception("The reaper's sweep failed; retrying.")
    finally:
        for companion in companions:
            companion.cancel()


async def take_handed_off(conversation_id: uuid.UUID, message_id: uuid.UUID) -> TurnHandle | None:
    """Resume, here, a turn another process announced it handed off; None when another process was first."""
    handles = await take_handed_off_many([(conversation_id, message_id)])
    return handles[0] if handles else None


async def take_handed_off_many(claims: list[tuple[uuid.UUID, uuid.UUID]]) -> list[TurnHandle]:
    """Resume, here, the turns (``(conversation id, message id)``) other processes announced they handed off.

    Called by the reaper's companion that hears the announcements (so only where a reaper runs), with
    its share of one announcement. A turn already claimed elsewhere is Busy, one that ended is Gone:
    both are someone else's now and left out of the handles. The turns are claimed in one call
    (:meth:`~agent_persistence.stores.protocols.TurnStoreProtocol.resume_many`). A task worker
    (``TURN_RUNNER = "tasks"``) claims them for itself and drives them at once, as the in-process
    runner does: through the queue, a worker that drains handed its turns to one that ran their tasks
    one after another (50 turns: 1.8 s for the median turn to stream again).

    The claim runs on a small pool of its own (:data:`CLAIM_THREADS` threads, each with a database
    connection while it claims), not on the producer thread: the claims of a replica's hand-offs would queue behind
    this process's own producers' writes, one round trip at a time.
    """
    from ..stores.twins import heal_connections

    if is_draining() or not app_settings.REAPER_ENABLED or not claims:
        return []

    here = drives_turns()

    def claim(chunk: list[tuple[uuid.UUID, uuid.UUID]]) -> dict[uuid.UUID, TurnPlan | Exception]:
        heal_connections()
        try:
            refuse_if_draining()
            return turn_store().resume_many([{"conversation_id": pk, "message_id": message_id} for pk, message_id in chunk],
                                            replica=replica_id() if here else claimant())
        finally:
            # Claims come with deploys: a claim thread gives its connection back (to the pool, when there is one)
            # instead of holding one open between them.
            connections.close_all()

    async def claim_chunk(chunk: list[tuple[uuid.UUID, uuid.UUID]]) -> dict[uuid.UUID, TurnPlan | Exception]:
        try:
            return await sync_to_async(claim, thread_sensitive=False, executor=_claim_pool())(chunk)
        except ShuttingDown:
            return {}
        except Exception:  # noqa: BLE001 - the other calls' turns are launched all the same; a sweep takes these
            logger.warning("Could not take over %d handed-off turn(s); a reaper's sweep takes them.", len(chunk),
                           exc_info=True)
            return {}

    # In as many calls as the pool has threads, side by side: one call for them all kept the first turn
    # waiting for the last one's claim and plan.
    chunks = [claims[start::CLAIM_THREADS] for start in range(min(CLAIM_THREADS, len(claims)))]
    handles = []
    with claiming():
        for claimed in asyncio.as_completed([claim_chunk(chunk) for chunk in chunks]):
            for plan in (await claimed).values():
                if isinstance(plan, TurnPlan):  # the others were refused (Busy, Gone, NotFound): someone else's
                    handles.append(launch_here(plan) if here else await enqueued(launch(plan)))
    return handles


#: Threads (so database connections) of a process's pool for claiming handed-off turns.
CLAIM_THREADS = 4
_claim_threads: list[Any] = []


def _claim_pool() -> Any:
    """The process's claim pool (made on first use, so never in a process that claims nothing)."""
    import concurrent.futures

    if not _claim_threads:
        _claim_threads.append(concurrent.futures.ThreadPoolExecutor(CLAIM_THREADS, thread_name_prefix="agent_persistence.claim"))
    return _claim_threads[0]


__all__ = [
    "REAPER_LEASE_KEY",
    "REAPER_LEASE_TENANT",
    "SweepLease",
    "TurnHandle",
    "begin_turn",
    "cancel_turn",
    "close_out_dead_turn",
    "continue_turn",
    "drive_claims_here",
    "drives_turns",
    "ensure_reaper",
    "force_release",
    "launch",
    "launch_here",
    "reap_dead_turns",
    "reap_forever",
    "reaper_lease_ttl",
    "request_stop",
    "resume_turn",
    "runs_on_workers",
    "start_turn",
    "stop_turn_now",
    "take_handed_off",
    "take_handed_off_many",
]
