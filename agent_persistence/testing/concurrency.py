"""Run one function in many threads or OS processes at once, on real transactions.

Every worker waits at a barrier so they start together, opens its own database
connection and closes it when done. Results come back in worker order; an
exception in a worker is returned, not raised, so a test can count outcomes.
"""

from __future__ import annotations

import multiprocessing
import threading
import traceback
from typing import Any, Callable

from django.db import connections


def run_in_threads(count: int, target: Callable[[int], Any], *, timeout: float = 60.0) -> list[Any]:
    """``target(i)`` for i in 0..count-1, each in its own thread; returns results or exceptions."""
    barrier = threading.Barrier(count)
    results: list[Any] = [None] * count

    def worker(index: int) -> None:
        try:
            barrier.wait(timeout)
            results[index] = target(index)
        except BaseException as exc:  # noqa: BLE001 - the caller inspects every outcome
            results[index] = exc
        finally:
            connections.close_all()

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
        if thread.is_alive():
            raise TimeoutError(f"A worker thread did not finish within {timeout} s.")
    return results


def _process_main(target: Callable[[int], Any], index: int, barrier: Any, queue: Any) -> None:
    # The parent closed its connections before forking, so the child opens its own.
    try:
        barrier.wait(60)
        queue.put((index, "ok", target(index)))
    except BaseException as exc:  # noqa: BLE001
        queue.put((index, "error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))
    finally:
        connections.close_all()


def run_in_processes(count: int, target: Callable[[int], Any], *, timeout: float = 120.0) -> list[Any]:
    """``target(i)`` in ``count`` forked OS processes; results must pickle.

    A worker that raised is reported as a ``RuntimeError`` carrying its traceback.
    """
    connections.close_all()
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(count)
    queue = context.Queue()
    processes = [context.Process(target=_process_main, args=(target, i, barrier, queue)) for i in range(count)]
    for process in processes:
        process.start()
    results: list[Any] = [None] * count
    for _ in range(count):
        index, status, value = queue.get(timeout=timeout)
        results[index] = value if status == "ok" else RuntimeError(value)
    for process in processes:
        process.join(timeout)
    return results
