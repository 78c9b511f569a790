"""The process's producer loop: one event loop, in a daemon thread, that hosts every producer.

Views (sync DRF views under WSGI or ASGI) and websocket consumers (on the
server's own loop) hand turns to it with :func:`submit`; keeping all producers
of a process on one loop keeps their periodic work batched in one supervisor,
and a producer never dies with the request or the connection that started it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import threading
from typing import Any, Coroutine, TypeVar

T = TypeVar("T")

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None


def producer_loop() -> asyncio.AbstractEventLoop:
    """The running producer loop, started on first use."""
    global _loop
    with _lock:
        if _loop is None or _loop.is_closed():
            loop = asyncio.new_event_loop()
            ready = threading.Event()

            def run() -> None:
                asyncio.set_event_loop(loop)
                loop.call_soon(ready.set)
                loop.run_forever()

            threading.Thread(target=run, name="agent_persistence.producers", daemon=True).start()
            ready.wait()
            _loop = loop
        return _loop


def submit(coroutine: Coroutine[Any, Any, T]) -> "concurrent.futures.Future[T]":
    """Run ``coroutine`` on the producer loop; the returned future is safe to wait on from any thread.

    The coroutine starts in an empty ``contextvars`` context, not the caller's:
    under an ASGI server the caller is a request's sync thread, and asgiref's
    thread-sensitive calls made in the request's context would queue behind
    that very thread (a deadlock) and die with the request. Producers outlive
    requests, so their database calls get asgiref's own single sync thread.
    """
    return contextvars.Context().run(asyncio.run_coroutine_threadsafe, coroutine, producer_loop())


def run(coroutine: Coroutine[Any, Any, T], timeout: float | None = 60) -> T:
    """Run ``coroutine`` on the producer loop and wait for its result (from sync code)."""
    return submit(coroutine).result(timeout)


async def run_async(coroutine: Coroutine[Any, Any, T]) -> T:
    """Await ``coroutine`` run on the producer loop (from another event loop)."""
    return await asyncio.wrap_future(submit(coroutine))
