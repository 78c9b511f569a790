"""The generation run store against its contract, on the configured database and in memory."""

from __future__ import annotations

from typing import Any

import pytest

from agent_persistence.testing.family import Stores, memory_stores
from agent_persistence.testing.generations import GenerationRunStoreContract


class TestGenerationRunStore(GenerationRunStoreContract):
    pass


class TestMemoryGenerationRunStore(GenerationRunStoreContract):
    def make_stores(self) -> Stores:
        return memory_stores()

    @pytest.fixture(autouse=True)
    def no_database(self, stores: Any, django_db_blocker: Any) -> Any:
        with django_db_blocker.block():
            yield
