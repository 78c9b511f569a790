"""Run the async tests of this folder with asgiref (no asyncio plugin needed).

``async_to_sync`` keeps thread-sensitive database calls on the test's own
thread, as Django does under an ASGI server.
"""

from __future__ import annotations

import inspect

import pytest
from asgiref.sync import async_to_sync


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    arguments = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
    async_to_sync(pyfuncitem.obj)(**arguments)
    return True


@pytest.fixture(autouse=True)
def close_producer_connections():
    """Close the database connections of the producer loop's thread, so the test database can go."""
    yield
    from asgiref.sync import sync_to_async
    from django.db import connections

    from agent_persistence.runtime import loop

    loop.run(sync_to_async(connections.close_all)())
