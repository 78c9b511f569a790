"""Reconstruct-for-reload against its contract: on the ORM family (the configured database) and the in-memory one."""

from __future__ import annotations

from typing import Any

import pytest

from agent_persistence.testing.family import Stores, memory_stores
from agent_persistence.testing.reconstruct import ReconstructContract


class TestReconstruct(ReconstructContract):
    pass


class TestMemoryReconstruct(ReconstructContract):
    def make_stores(self) -> Stores:
        return memory_stores()

    @pytest.fixture(autouse=True)
    def no_database(self, stores: Any, django_db_blocker: Any) -> Any:
        with django_db_blocker.block():
            yield
