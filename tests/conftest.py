"""Fixtures shared by the test suite."""

from __future__ import annotations

import pytest
from django.db import connection

from agent_persistence.scope import Scope
from agent_persistence.testing.actors import ALICE, BOB, MALLORY


def pytest_report_header(config: pytest.Config) -> str:
    from django.conf import settings

    return f"agent_persistence database: {settings.DATABASES['default']['ENGINE']}"


@pytest.fixture
def alice() -> Scope:
    return ALICE


@pytest.fixture
def bob() -> Scope:
    """Another user of alice's tenant."""
    return BOB


@pytest.fixture
def mallory() -> Scope:
    """A user of another tenant, with alice's user id."""
    return MALLORY


@pytest.fixture
def is_postgres() -> bool:
    return connection.vendor == "postgresql"
