"""Fixtures shared by the API tests: users, API clients, tenants.

Users ``alice`` and ``bob`` belong to tenant "" under the default scope
resolver (Scope("", str(user.pk))). ``mallory`` is a user of another tenant:
requesting the ``tenants`` fixture switches ``SCOPE_RESOLVER`` to
:func:`scope_from_user_names`, under which mallory acts with alice's user id
in tenant "other", so only the tenant keeps them apart.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable, Iterator

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model
from django.db import connections
from rest_framework.test import APIClient

from agent_persistence.runtime import loop
from agent_persistence.runtime.producer import Supervisor
from agent_persistence.scope import Scope


def scope_from_user_names(request: Any) -> Scope | None:
    """A test resolver: tenant from ``user.last_name``, user id from ``first_name`` or the pk."""
    user = getattr(request, "user", None)
    if user is None or not getattr(user, "is_authenticated", False):
        return None
    return Scope(tenant=user.last_name, user=user.first_name or str(user.pk))


@pytest.fixture
def alice_user(db: Any) -> Any:
    return get_user_model().objects.create_user("alice", password="alice-password")


@pytest.fixture
def bob_user(db: Any) -> Any:
    """Another user of alice's tenant."""
    return get_user_model().objects.create_user("bob", password="bob-password")


@pytest.fixture
def tenants(settings: Any) -> None:
    """Use :func:`scope_from_user_names` as the scope resolver for this test."""
    settings.AGENT_PERSISTENCE = {
        **settings.AGENT_PERSISTENCE,
        "SCOPE_RESOLVER": "tests.api.conftest.scope_from_user_names",
    }


@pytest.fixture
def mallory_user(db: Any, tenants: None, alice_user: Any) -> Any:
    """A user of tenant "other" who carries alice's user id."""
    return get_user_model().objects.create_user(
        "mallory", password="mallory-password", first_name=str(alice_user.pk), last_name="other"
    )


@pytest.fixture
def alice_scope(alice_user: Any) -> Scope:
    """The scope alice's requests resolve to (store calls in tests use it)."""
    return Scope(tenant="", user=str(alice_user.pk))


@pytest.fixture
def bob_scope(bob_user: Any) -> Scope:
    return Scope(tenant="", user=str(bob_user.pk))


@pytest.fixture
def client_for() -> Callable[[Any], APIClient]:
    """``client_for(user)``: an APIClient authenticated as ``user`` (None: anonymous)."""

    def make(user: Any) -> APIClient:
        client = APIClient()
        if user is not None:
            client.force_authenticate(user)
        return client

    return make


@pytest.fixture
def anon_client(db: Any) -> APIClient:
    return APIClient()


@pytest.fixture
def alice_client(alice_user: Any, client_for: Callable[[Any], APIClient]) -> APIClient:
    return client_for(alice_user)


@pytest.fixture
def bob_client(bob_user: Any, client_for: Callable[[Any], APIClient]) -> APIClient:
    return client_for(bob_user)


@pytest.fixture
def mallory_client(mallory_user: Any, client_for: Callable[[Any], APIClient]) -> APIClient:
    return client_for(mallory_user)


@pytest.fixture
def drained_producer_loop(transactional_db: Any) -> Iterator[None]:
    """After the test: wait for this process's producers, then close the producer loop thread's connection."""
    yield

    async def drain() -> None:
        supervisor = Supervisor.current()
        deadline = time.monotonic() + 20
        while supervisor.producers and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        for producer in list(supervisor.producers.values()):
            if producer.task is not None:
                producer.task.cancel()
        await asyncio.sleep(0.05)
        await sync_to_async(connections.close_all)()

    loop.run(drain(), timeout=30)
