"""The contract of a generation run store, as a pytest class a custom backend can subclass.

::

    from agent_persistence.testing.generations import GenerationRunStoreContract

    class TestMyGenerationRunStore(GenerationRunStoreContract):
        def make_store(self):
            return MyGenerationRunStore()
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.utils import timezone

from ..conf import app_settings
from ..exceptions import Conflict, ConversationNotOwned, NotFound, StorageLimit, Validation
from ..ids import uuid7
from .actors import ALICE, BOB, MALLORY, Actors
from .concurrency import run_in_threads
from .family import FamilyContract, frozen_clock, record_of

RACE_ROUNDS = 3
RACE_THREADS = 6


def too_deep() -> Any:
    """A JSON value nested past ``JSON_MAX_DEPTH``."""
    value: Any = 1
    for _ in range(app_settings.JSON_MAX_DEPTH + 1):
        value = [value]
    return value


class GenerationRunStoreContract(Actors, FamilyContract):
    """Every rule of a generation run store, checked on real transactions."""

    def make_store(self) -> Any:
        return self.family.generations

    @pytest.fixture
    def store(self, stores: Any) -> Any:
        return self.make_store()

    def start(self, store: Any, scope: Any = ALICE, **fields: Any) -> Any:
        return store.create_or_resume(scope, id=fields.pop("id", uuid7()), slot=fields.pop("slot", "hero"),
                                      kind=fields.pop("kind", "image"), **fields)

    # -- create or resume -----------------------------------------------------------------------

    def test_create_records_a_running_generation(self, store: Any) -> None:
        run_id = uuid7()
        run = store.create_or_resume(ALICE, id=str(run_id), slot="product-42-hero", kind="image", provider="openai",
                                     model="gpt-image-1", metadata={"prompt": "a red bike"})
        assert (run.pk, run.slot, run.kind, run.status, run.provider, run.model) == (
            run_id, "product-42-hero", "image", "running", "openai", "gpt-image-1")
        assert run.finished_at is None and run.metadata == {"prompt": "a red bike"} and run.conversation_id is None
        assert record_of(store.get(ALICE, run_id)) == record_of(run)

    def test_a_second_create_returns_the_stored_record_unchanged(self, store: Any) -> None:
        first = self.start(store, slot="a", kind="audio", provider="p1")
        store.update(ALICE, first.pk, status="completed", result={"url": "blob"})
        again = store.create_or_resume(ALICE, id=first.pk, slot="b", kind="video", provider="p2", metadata={"x": 1})
        assert (again.slot, again.kind, again.provider, again.status, again.result) == ("a", "audio", "p1", "completed",
                                                                                          {"url": "blob"})

    def test_an_id_of_someone_else_is_taken(self, store: Any) -> None:
        run = self.start(store)
        for scope in (BOB, MALLORY):
            with pytest.raises(Conflict) as caught:
                self.start(store, scope, id=run.pk)
            assert caught.value.code == "generation_run_id_taken"

    def test_caller_started_at_is_kept(self, store: Any) -> None:
        started = timezone.now() - timedelta(days=3)
        run = self.start(store, started_at=started.isoformat())
        assert store.get(ALICE, run.pk).started_at == started

    @pytest.mark.parametrize(
        "fields",
        [{"id": "not-a-uuid"}, {"slot": ""}, {"slot": "a\x00b"}, {"slot": "\ud800"}, {"slot": "x" * 256}, {"slot": 5},
         {"kind": "chat"}, {"kind": None}, {"provider": 3}, {"started_at": "yesterday"},
         {"started_at": "2026-01-01T00:00:00"}, {"metadata": [1]}, {"metadata": {"a": float("nan")}}],
    )
    def test_bad_input_is_refused_and_writes_nothing(self, store: Any, fields: dict[str, Any]) -> None:
        run_id = fields.get("id", uuid7())
        with pytest.raises(Validation):
            self.start(store, **{**fields, "id": run_id})
        if not isinstance(run_id, str):
            with pytest.raises(NotFound):
                store.get(ALICE, run_id)

    def test_a_conversation_of_someone_else_is_refused(self, store: Any) -> None:
        shared = self.new_conversation(ALICE, shared=True)
        with pytest.raises(ConversationNotOwned):
            self.start(store, BOB, conversation_id=shared.pk)
        with pytest.raises(NotFound):
            self.start(store, MALLORY, conversation_id=shared.pk)

    @pytest.mark.django_db(transaction=True)
    def test_concurrent_creates_of_one_id_insert_one_row_and_agree(self, store: Any) -> None:
        for round_number in range(RACE_ROUNDS):
            run_id = uuid7()

            def create(index: int) -> tuple[uuid.UUID, str]:
                run = store.create_or_resume(ALICE, id=run_id, slot=f"slot-{round_number}-{index}", kind="speech")
                return run.pk, run.slot

            outcomes = run_in_threads(RACE_THREADS, create)
            assert not [o for o in outcomes if isinstance(o, BaseException)], outcomes
            assert len(set(outcomes)) == 1  # every caller got the one stored record
            slot = outcomes[0][1]
            assert store.get(ALICE, run_id).slot == slot
            assert store.latest(ALICE, slot).pk == run_id
            assert [store.latest(ALICE, f"slot-{round_number}-{i}") for i in range(RACE_THREADS)].count(None) == RACE_THREADS - 1

    # -- update ------------------------------------------------------------------------------------

    def test_update_patches_only_what_it_is_given(self, store: Any) -> None:
        run = self.start(store, metadata={"prompt": "p"})
        updated = store.update(ALICE, run.pk, result={"images": [{"artifact": "a1"}]}, usage={"images": 1})
        assert updated.result == {"images": [{"artifact": "a1"}]} and updated.usage == {"images": 1}
        assert updated.metadata == {"prompt": "p"} and updated.status == "running"
        finished = store.update(ALICE, run.pk, status="completed")
        assert finished.status == "completed" and finished.finished_at is not None
        stored = store.get(ALICE, run.pk)
        assert record_of(stored) == record_of(finished)

    def test_artifact_refs_are_kept_by_update_and_returned_by_get(self, store: Any) -> None:
        """TanStack's generation run ``artifacts`` (refs to the bytes it made): ``update(artifacts=)``, ``run.artifact_refs``."""
        run = self.start(store)
        assert run.artifact_refs == [] and store.get(ALICE, run.pk).artifact_refs == []
        refs = [{"artifactId": str(uuid7()), "blobKey": "artifacts/r/1", "mediaType": "image/png"}, {"artifactId": "b"}]
        assert store.update(ALICE, run.pk, artifacts=refs).artifact_refs == refs
        assert store.get(ALICE, run.pk).artifact_refs == refs
        assert store.latest(ALICE, run.slot).artifact_refs == refs
        store.update(ALICE, run.pk, status="completed")
        assert store.get(ALICE, run.pk).artifact_refs == refs
        assert store.update(ALICE, run.pk, artifacts=refs[1:]).artifact_refs == refs[1:]
        assert async_to_sync(store.aupdate)(ALICE, run.pk, artifacts=[]).artifact_refs == []

    @pytest.mark.parametrize(
        "artifacts", [None, {"artifactId": "a"}, ["a"], [1], [None], [[]], [{"k": float("nan")}], "refs",
                      [{"k": "x" * 70_000}], [{}] * 1001],
        ids=["none", "object", "text-ref", "number-ref", "null-ref", "list-ref", "nan", "text", "too-large", "too-many"],
    )
    def test_bad_artifact_refs_are_refused_and_write_nothing(self, store: Any, artifacts: Any) -> None:
        run = self.start(store)
        store.update(ALICE, run.pk, artifacts=[{"artifactId": "kept"}])
        with pytest.raises((Validation, StorageLimit)) as caught:
            store.update(ALICE, run.pk, artifacts=artifacts, status="completed")
        assert caught.value.details.get("field") == "artifacts"
        stored = store.get(ALICE, run.pk)
        assert (stored.artifact_refs, stored.status) == ([{"artifactId": "kept"}], "running")

    def test_update_keeps_finished_at_consistent(self, store: Any) -> None:
        run = self.start(store)
        at = run.started_at + timedelta(seconds=5)
        failed = store.update(ALICE, run.pk, status="failed", finished_at=at, error={"message": "quota", "code": "429"})
        assert (failed.finished_at, failed.error) == (at, {"message": "quota", "code": "429"})
        assert store.update(ALICE, run.pk, usage={"seconds": 2}).finished_at == at
        assert store.update(ALICE, run.pk, status="running").finished_at is None
        for changes in ({"finished_at": at}, {"status": "completed", "finished_at": run.started_at - timedelta(seconds=1)},
                        {"status": "done"}, {"error": "text"}, {"finished_at": "2026-01-01T00:00:00"},
                        {"result": too_deep()}):
            with pytest.raises(Validation):
                store.update(ALICE, run.pk, **changes)
        assert record_of(store.get(ALICE, run.pk))["status"] == "running"

    def test_update_of_a_missing_or_invisible_id_is_a_no_op(self, store: Any) -> None:
        run = self.start(store)
        assert store.update(ALICE, uuid7(), status="completed") is None
        assert store.update(ALICE, "not-a-uuid", status="completed") is None
        for scope in (BOB, MALLORY):
            assert store.update(scope, run.pk, status="completed") is None
        assert store.get(ALICE, run.pk).status == "running"

    def test_a_reader_of_its_conversation_may_read_not_write(self, store: Any) -> None:
        shared = self.new_conversation(ALICE, shared=True)
        run = self.start(store, conversation_id=shared.pk)
        assert store.get(BOB, run.pk).pk == run.pk
        with pytest.raises(ConversationNotOwned):
            store.update(BOB, run.pk, status="aborted")
        with pytest.raises(ConversationNotOwned):
            store.delete(BOB, run.pk)
        with pytest.raises(NotFound):
            store.get(MALLORY, run.pk)
        private = self.start(store)
        with pytest.raises(NotFound) as caught:
            store.get(BOB, private.pk)
        assert caught.value.code == "generation_run_not_found"

    # -- latest -------------------------------------------------------------------------------------

    def test_latest_is_the_newest_run_of_the_slot(self, store: Any) -> None:
        assert store.latest(ALICE, "hero") is None
        now = timezone.now()
        older = self.start(store, started_at=now - timedelta(minutes=2))
        newer = self.start(store, started_at=now - timedelta(minutes=1))
        self.start(store, slot="other", started_at=now)
        self.start(store, BOB, started_at=now)
        self.start(store, MALLORY, started_at=now)
        assert store.latest(ALICE, "hero").pk == newer.pk
        with frozen_clock(now):
            tied = [self.start(store, slot="tie") for _ in range(3)]
        assert store.latest(ALICE, "tie").pk == max(run.pk for run in tied)
        assert older.pk != newer.pk
        with pytest.raises(Validation):
            store.latest(ALICE, "")

    # -- delete -------------------------------------------------------------------------------------

    def test_delete_and_conversation_delete_remove_the_run(self, store: Any) -> None:
        run = self.start(store)
        store.delete(ALICE, run.pk)
        with pytest.raises(NotFound):
            store.get(ALICE, run.pk)
        with pytest.raises(NotFound):
            store.delete(ALICE, run.pk)
        conversation = self.new_conversation(ALICE)
        filed = self.start(store, conversation_id=conversation.pk)
        self.family.conversations.delete(ALICE, conversation.pk)
        with pytest.raises(NotFound):
            store.get(ALICE, filed.pk)

    def test_async_twins(self, store: Any) -> None:
        run_id = uuid7()
        async_to_sync(store.acreate_or_resume)(ALICE, id=run_id, slot="s", kind="transcription")
        async_to_sync(store.aupdate)(ALICE, run_id, status="completed", result={"text": "hello"})
        assert async_to_sync(store.aget)(ALICE, run_id).result == {"text": "hello"}
        assert async_to_sync(store.alatest)(ALICE, "s").pk == run_id
        async_to_sync(store.adelete)(ALICE, run_id)
        assert store.latest(ALICE, "s") is None
