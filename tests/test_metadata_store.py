"""The metadata store against its contract: the ORM store on the configured database, and its in-memory twin."""

from __future__ import annotations

from typing import Any

import pytest

from agent_persistence.testing.metadata import MetadataStoreContract
from agent_persistence.testing.family import Stores, memory_stores


class TestMetadataStore(MetadataStoreContract):
    pass


class TestMemoryMetadataStore(MetadataStoreContract):
    def make_stores(self) -> Stores:
        return memory_stores()

    @pytest.fixture(autouse=True)
    def no_database(self, stores: Any, django_db_blocker: Any) -> Any:
        with django_db_blocker.block():
            yield
