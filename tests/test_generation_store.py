"""The generation run store against its contract, on the configured database and in memory."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from agent_persistence.conf import app_settings
from agent_persistence.exceptions import NotFound, Validation
from agent_persistence.ids import uuid7
from agent_persistence.testing.actors import ALICE
from agent_persistence.testing.family import Stores, memory_stores
from agent_persistence.testing.generations import GenerationRunStoreContract


class ImportedTimes:
    """Issue 21 item 9: started_at is an imported time, refused beyond IMPORT_CLOCK_SKEW like every other store's."""

    def test_a_future_started_at_is_future_time_and_nothing_is_stored(self, store: Any) -> None:
        run_id = uuid7()
        ahead = timezone.now() + timedelta(seconds=app_settings.IMPORT_CLOCK_SKEW + 3600)
        for value in (ahead, ahead.isoformat()):
            with pytest.raises(Validation) as caught:
                store.create_or_resume(ALICE, id=run_id, slot="hero", kind="image", started_at=value)
            assert (caught.value.code, caught.value.details.get("field")) == ("future_time", "started_at")
            with pytest.raises(NotFound):
                store.get(ALICE, run_id)
        assert store.latest(ALICE, "hero") is None

    def test_a_started_at_within_the_skew_and_a_naive_one(self, store: Any) -> None:
        within = timezone.now() + timedelta(seconds=app_settings.IMPORT_CLOCK_SKEW // 2)
        run = store.create_or_resume(ALICE, id=uuid7(), slot="hero", kind="image", started_at=within)
        assert run.started_at == within
        with pytest.raises(Validation) as caught:
            store.create_or_resume(ALICE, id=uuid7(), slot="hero", kind="image", started_at="2024-01-02T12:00:00")
        assert caught.value.code == "naive_time"


class TestGenerationRunStore(ImportedTimes, GenerationRunStoreContract):
    pass


class TestMemoryGenerationRunStore(ImportedTimes, GenerationRunStoreContract):
    def make_stores(self) -> Stores:
        return memory_stores()

    @pytest.fixture(autouse=True)
    def no_database(self, stores: Any, django_db_blocker: Any) -> Any:
        with django_db_blocker.block():
            yield
