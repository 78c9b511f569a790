"""A worker tier: producers run on Django Tasks workers (``TURN_RUNNER = "tasks"``).

The web process commits the transition as usual (the turn is claimed at its epoch for the replica
``queued``), then, once that transaction has committed (``transaction.on_commit``), enqueues the
run's identity (conversation, turn message, run, epoch, scope, agent) as the task :data:`drive_turn`
through Django's Tasks framework: ``django.tasks`` on Django 6, the ``django-tasks`` backport on
5.2 (the same API; picked at import). Followers see the turn ``queued`` until a worker takes it.

The task, on a worker (django-tasks-db's ``db_worker``, Celery's ``celery worker`` through
django-tasks-celery):

1. takes the turn: one statement writes its replica and first heartbeat iff the row still runs that
   run at that epoch and waits for a worker
   (:meth:`~agent_persistence.stores.supervision.SupervisionStore.take_queued`), so a task run twice,
   or one whose turn was taken over or ended meanwhile, drives nothing;
2. reads the plan again through the stores (transcript, recording index, checkpoint, answers);
3. starts the producer on the process's producer loop (:mod:`.loop`, one event loop in a daemon
   thread that outlives the task) and returns. The worker's own loop goes on taking tasks while the
   producers stream, heartbeat and seal there, fenced by the epoch as everywhere: a stale epoch
   writes nothing.

The worker process also runs the reaper (``REAPER_ENABLED``; the in-process reaper and its hand-off
listener start with the process, or with its first task) and drains on SIGTERM as a server does
(:func:`.shutdown.drain`: no new turn, ``SHUTDOWN_GRACE``, hand-offs at a step boundary), then lets
the worker's own shutdown go on. A task that reaches a draining worker is enqueued again for another.
Resumes (the reaper's, a hand-off's claim, ``resume`` from a client) go through the queue too.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from typing import Any

from django.db import transaction

from ..scope import Scope
from ..stores import supervision_store, turn_store
from ..stores.protocols import TurnPlan
from . import hooks, loop
from .lifecycle import drive_claims_here, ensure_reaper, launch_here
from .producer import replica_id
from .shutdown import drain, is_draining, stop_taking_turns

try:  # Django 6: the framework is Django's own
    from django.tasks import task as _task  # type: ignore[import-not-found,unused-ignore]
except ImportError:  # Django 5.2: the django-tasks backport (the extra "tasks")
    from django_tasks import task as _task  # type: ignore[no-redef,unused-ignore]

logger = logging.getLogger(__name__)

#: Seconds a draining worker waits before it enqueues again a task it may not run (so it does not spin on it).
REQUEUE_DELAY = 0.2


def identity(plan: TurnPlan) -> dict[str, Any]:
    """The task's arguments: what a worker needs to find the run again (JSON only)."""
    return {
        "conversation_id": str(plan.conversation_id),
        "message_id": str(plan.message_id),
        "run_id": str(plan.run_id),
        "epoch": plan.epoch,
        "tenant": plan.scope.tenant,
        "user": plan.scope.user,
        "agent": plan.agent_name,
        "resumed": plan.resumed,
    }


def enqueue(arguments: dict[str, Any]) -> Any:
    """Enqueue :data:`drive_turn` with ``arguments`` once the current transaction (if any) has committed."""
    result: list[Any] = []
    transaction.on_commit(lambda: result.append(drive_turn.enqueue(**arguments)))
    return result[0] if result else None


async def enqueue_on_commit(plan: TurnPlan) -> Any:
    """Enqueue the run of ``plan`` for a worker (from the producer loop: the backend's write is sync)."""
    from asgiref.sync import sync_to_async

    try:
        return await sync_to_async(enqueue)(identity(plan))
    except Exception:  # noqa: BLE001 - the turn reads dead after DEAD_AFTER and a reaper enqueues it again
        logger.exception("Could not enqueue turn %s of conversation %s for a worker; a reaper retries after DEAD_AFTER.",
                         plan.message_id, plan.conversation_id)
        return None


@_task()
def drive_turn(*, conversation_id: str, message_id: str, run_id: str, epoch: int, tenant: str, user: str, agent: str,
                resumed: bool) -> str:
    """The task a worker runs for each enqueued run: take the queued turn and start its producer on this process's
    producer loop.

    Returns what it did: ``started``, ``not_queued`` (run twice, taken over, ended, fenced) or ``requeued``
    (this worker shuts down: another one runs it).
    """
    start_worker()
    arguments = {"conversation_id": conversation_id, "message_id": message_id, "run_id": run_id, "epoch": epoch,
                 "tenant": tenant, "user": user, "agent": agent, "resumed": resumed}
    if is_draining():
        time.sleep(REQUEUE_DELAY)
        enqueue(arguments)
        return "requeued"
    if not supervision_store().take_queued(conversation_id, epoch=epoch, run_id=run_id, replica=replica_id()):
        logger.info("Turn %s of conversation %s (epoch %s) is no longer queued: this task drives nothing.",
                    message_id, conversation_id, epoch)
        return "not_queued"
    plan = turn_store().plan_of(Scope(tenant=tenant, user=user), conversation_id, message_id=message_id, run_id=run_id,
                                epoch=epoch, agent_name=agent, resumed=resumed)

    async def start() -> None:
        launch_here(plan)

    loop.run(start(), timeout=30)
    return "started"


# -- the worker process -------------------------------------------------------------------------------

_drained = threading.Event()
_previous_handlers: dict[int, Any] = {}


def start_worker() -> None:
    """Start the reaper (``REAPER_ENABLED``) and, from the main thread, put the drain on SIGTERM (both idempotent).

    Called by each task: a worker installs its own signal handlers once it runs (after ``AppConfig.ready``),
    so the drain goes in front of them at its first task.
    """
    drive_claims_here()
    ensure_reaper()
    if threading.current_thread() is threading.main_thread():
        install_drain_on_sigterm()


def install_drain_on_sigterm() -> None:
    """Put the drain in front of the worker's own SIGTERM/SIGINT handlers (db_worker's graceful stop).

    The first signal stops taking turns and drains the producer loop on a thread of its own (the
    worker's loop goes on meanwhile, enqueuing again what it is handed); once the drain is done the
    signal is raised again and reaches the worker's handler, which stops the worker.
    """
    for number in (signal.SIGTERM, signal.SIGINT):
        previous = signal.getsignal(number)
        if previous is _on_signal:
            continue
        _previous_handlers[number] = previous
        signal.signal(number, _on_signal)


def _on_signal(number: int, frame: Any) -> None:
    if _drained.is_set():
        previous = _previous_handlers.get(number, signal.SIG_DFL)
        if callable(previous):
            previous(number, frame)
            return
        signal.signal(number, previous if previous is not None else signal.SIG_DFL)
        os.kill(os.getpid(), number)
        return
    if is_draining():
        return  # a second signal while draining: the drain is bounded
    stop_taking_turns()
    threading.Thread(target=_drain_then_stop, args=(number,), name="agent_persistence.worker.drain", daemon=True).start()


def _drain_then_stop(number: int) -> None:
    try:
        report = drain_worker()
        sys.stderr.write(f"Worker shut down: {report.handed_off} turn(s) handed off "
                         f"({report.model_calls_in_flight} with a model call in flight), {report.left} left for a reaper.\n")
        sys.stderr.flush()
    finally:
        _drained.set()
        os.kill(os.getpid(), number)


def drain_worker() -> Any:
    """Drain this worker's producers (from any thread but the producer loop's); the :class:`~.producer.DrainReport`."""
    return loop.run(drain(), timeout=None)


def connect_celery() -> None:
    """Celery workers: the reaper with the worker, the drain on its warm shutdown (``worker_shutting_down``).

    The producers run in the process that runs the task: use a pool that runs tasks in the worker process
    (``--pool solo``, what the tests run, or ``--pool threads``); prefork children are not drained.
    """
    from celery import signals

    def ready(**kwargs: Any) -> None:
        drive_claims_here()
        ensure_reaper()

    def shutting_down(**kwargs: Any) -> None:
        if is_draining():
            return
        report = drain_worker()
        sys.stderr.write(f"Worker shut down: {report.handed_off} turn(s) handed off "
                         f"({report.model_calls_in_flight} with a model call in flight), {report.left} left for a reaper.\n")
        sys.stderr.flush()

    signals.worker_ready.connect(ready, weak=False, dispatch_uid="agent_persistence.worker_ready")
    signals.worker_shutting_down.connect(shutting_down, weak=False, dispatch_uid="agent_persistence.worker_shutting_down")


hooks.run_enqueuer = enqueue_on_commit

#: Commands that are task workers: the reaper starts with them.
WORKER_COMMANDS = frozenset({"db_worker"})


def is_worker_process(argv: list[str]) -> bool:
    return len(argv) > 1 and argv[1] in WORKER_COMMANDS


__all__ = ["connect_celery", "drain_worker", "drive_turn", "enqueue", "enqueue_on_commit", "identity",
           "install_drain_on_sigterm", "start_worker"]
