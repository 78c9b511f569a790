"""Concurrent event appenders: a pool of spawned OS processes, each with its own connections.

Processes rather than threads, so eight appenders run Python on both cores at
once instead of taking turns under one GIL. Each worker sets Django up and
opens its connections once, then serves rounds: all workers of a round wait
at a barrier, append one event per call as fast as they can, and report when
they started, when they finished and each call's latency.
"""

from __future__ import annotations

import multiprocessing
import os
import time
import traceback
import uuid
from dataclasses import dataclass
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from typing import Any, Callable

from agent_persistence.scope import Scope

from .database import BENCH_DATABASE_ENV
from .measure import Round

EVENT_TYPE = "text_delta"
EVENT_DATA = {"delta": "a few tokens of the model's answer, as a stream sends them"}
EVENTS = [{"type": EVENT_TYPE, "data": EVENT_DATA}]
ROUND_TIMEOUT = 600.0


@dataclass(frozen=True)
class AppendTask:
    """One round for one worker: ``appends`` events, one per call, through ``kind`` ("store", "raw" or "raw1")."""

    kind: str
    scope: Scope
    conversation_id: uuid.UUID
    appends: int


@dataclass(frozen=True)
class WorkerReport:
    started: float
    finished: float
    latencies: list[float]
    error: str | None = None


def _appender(kind: str) -> Callable[[AppendTask], None]:
    """A function appending one event for a task, set up once per worker."""
    if kind == "store":
        from agent_persistence.stores import event_store

        store = event_store()

        def append_through_store(task: AppendTask) -> None:
            store.append(task.scope, task.conversation_id, EVENTS)

        return append_through_store

    from . import raw
    from .database import connect

    connection = connect(os.environ[BENCH_DATABASE_ENV], autocommit=True)

    if kind == "raw1":

        def append_one_statement(task: AppendTask) -> None:
            raw.append_event_one_statement(connection, task.scope, task.conversation_id, type=EVENT_TYPE, data=EVENT_DATA)

        return append_one_statement

    def append_raw(task: AppendTask) -> None:
        raw.append_event(connection, task.scope, task.conversation_id, type=EVENT_TYPE, data=EVENT_DATA)

    return append_raw


def _serve(barrier: Barrier, tasks: Queue, reports: Queue) -> None:
    import django

    django.setup()
    from django.db import connection

    connection.ensure_connection()
    appenders = {kind: _appender(kind) for kind in ("store", "raw", "raw1")}
    while (task := tasks.get()) is not None:
        append = appenders[task.kind]
        barrier.wait(ROUND_TIMEOUT)
        latencies: list[float] = []
        started = time.perf_counter()
        try:
            for _ in range(task.appends):
                call_started = time.perf_counter()
                append(task)
                latencies.append(time.perf_counter() - call_started)
        except Exception:
            reports.put(WorkerReport(started, time.perf_counter(), latencies, error=traceback.format_exc()))
            continue
        reports.put(WorkerReport(started, time.perf_counter(), latencies))


def serve(barrier: Barrier, tasks: Queue, reports: Queue) -> None:
    """A worker's main loop (the target of each spawned process)."""
    try:
        _serve(barrier, tasks, reports)
    except Exception:
        reports.put(WorkerReport(0.0, 0.0, [], error=traceback.format_exc()))


class AppenderPool:
    """``size`` worker processes that append to one conversation together, round after round."""

    def __init__(self, size: int) -> None:
        context = multiprocessing.get_context("spawn")
        self.size = size
        self.barrier = context.Barrier(size)
        self.reports: Queue = context.Queue()
        self.task_queues: list[Queue] = [context.Queue() for _ in range(size)]
        self.processes = [
            context.Process(target=serve, args=(self.barrier, queue, self.reports), daemon=True)
            for queue in self.task_queues
        ]
        for process in self.processes:
            process.start()

    def run(self, kind: str, scope: Scope, conversation_id: uuid.UUID, appends_each: int) -> Round:
        """One round: every worker appends ``appends_each`` events; the round lasts from first start to last finish."""
        for queue in self.task_queues:
            queue.put(AppendTask(kind, scope, conversation_id, appends_each))
        reports: list[WorkerReport] = [self.reports.get(timeout=ROUND_TIMEOUT) for _ in range(self.size)]
        errors = [report.error for report in reports if report.error]
        if errors:
            raise RuntimeError("An appender failed:\n" + errors[0])
        # perf_counter is CLOCK_MONOTONIC on Linux: comparable across processes.
        started = min(report.started for report in reports)
        finished = max(report.finished for report in reports)
        latencies = [sample for report in reports for sample in report.latencies]
        return Round(operations=len(latencies), seconds=finished - started, latencies=latencies)

    def close(self) -> None:
        for queue in self.task_queues:
            queue.put(None)
        for process in self.processes:
            process.join(timeout=30)
            if process.is_alive():
                process.terminate()

    def __enter__(self) -> AppenderPool:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()
