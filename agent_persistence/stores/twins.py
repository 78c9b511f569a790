"""Async twins: each store's ``a``-prefixed methods, run in Django's sync thread on healthy connections.

Stores are sync and open their own ``transaction.atomic()`` blocks; each async
twin (``aget`` for ``get``) is a thin ``sync_to_async`` wrapper, as Django's
own session backends do, and heals the thread's broken connections first.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, TypeVar

from asgiref.sync import sync_to_async
from django.db import connections

T = TypeVar("T")


def heal_connections() -> None:
    """Drop this thread's database connections that an error left unusable.

    Async twins run on long-lived threads (the producer loop's sync thread)
    that no request cycle ever cleans up: after a database restart their
    connection would stay broken forever. A connection that saw an error and
    no longer answers is closed, so the next query opens a fresh one; a
    healthy connection is kept (no reconnect per call, whatever CONN_MAX_AGE).
    """
    for alias_connection in connections.all(initialized_only=True):
        if alias_connection.connection is None or alias_connection.in_atomic_block or not alias_connection.errors_occurred:
            continue
        if alias_connection.is_usable():
            alias_connection.errors_occurred = False
        else:
            alias_connection.close()


def healed(method: Callable[..., T]) -> Callable[..., T]:
    """``method``, run after :func:`heal_connections` on the thread that runs it."""

    def call(*args: Any, **kwargs: Any) -> T:
        heal_connections()
        return method(*args, **kwargs)

    return call


def async_twin(name: str) -> Callable[..., Any]:
    """An ``async`` method that runs the sync method ``name`` in Django's sync thread (healing its connections)."""

    async def twin(self: Any, *args: Any, **kwargs: Any) -> Any:
        return await sync_to_async(healed(getattr(self, name)))(*args, **kwargs)

    twin.__name__ = f"a{name}"
    twin.__doc__ = f"Async twin of :meth:`{name}`."
    return twin


@functools.cache
def twins_of(protocol: type) -> type:
    """The base class both families' stores of ``protocol`` inherit their async twins from, built once per protocol.

    It holds :func:`async_twin` of every public sync method the protocol
    declares (``aget`` for ``get``), as Django's ``BaseCache`` holds the
    ``aget`` of every cache backend; a store class's own ``async def``
    takes precedence over its inherited twin.
    """
    names = [
        name
        for name, value in vars(protocol).items()
        if callable(value) and not name.startswith("_") and not inspect.iscoroutinefunction(value)
    ]
    stem = protocol.__name__.removesuffix("Protocol")
    namespace: dict[str, Any] = {"__doc__": f"The async twins of :class:`{protocol.__name__}`.", "__module__": __name__}
    for name in names:
        twin = async_twin(name)
        twin.__qualname__ = f"{stem}Twins.a{name}"
        namespace[f"a{name}"] = twin
    return type(f"{stem}Twins", (), namespace)
