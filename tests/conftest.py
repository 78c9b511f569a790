"""Fixtures shared by the test suite."""

from __future__ import annotations

import pytest
from django.db import connection

from agent_persistence.scope import Scope


def pytest_report_header(config: pytest.Config) -> str:
    from django.conf import settings

    return f"agent_persistence database: {settings.DATABASES['default']['ENGINE']}"


@pytest.fixture
def alice() -> Scope:
    return Scope(tenant="acme", user="alice")


@pytest.fixture
def bob() -> Scope:
    """Another user of alice's tenant."""
    return Scope(tenant="acme", user="bob")


@pytest.fixture
def mallory() -> Scope:
    """A user of another tenant, with alice's user id."""
    return Scope(tenant="other", user="alice")


@pytest.fixture
def is_postgres() -> bool:
    return connection.vendor == "postgresql"
