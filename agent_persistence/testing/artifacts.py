"""The contract of an artifact store, as a pytest class a custom backend can subclass.

::

    from agent_persistence.testing.artifacts import ArtifactStoreContract

    class TestMyArtifactStore(ArtifactStoreContract):
        def make_store(self):
            return MyArtifactStore()

Runs and conversations are arranged through the family's other stores; that
no bytes are left behind is asked of the family (``stored_blobs``).
"""

from __future__ import annotations

import io
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.utils import timezone

from ..exceptions import ConversationNotOwned, NotFound, RangeNotSatisfiable, Validation
from ..ids import uuid7
from ..stores.blobs import ByteRange
from .actors import ALICE, BOB, MALLORY, Actors
from .family import FamilyContract, frozen_clock, new_run


class _StreamWithHook:
    """A stream that runs ``at_end`` once, when it is read to its end (between the checks and the insert)."""

    def __init__(self, data: bytes, at_end: Any) -> None:
        self._data, self._at_end = io.BytesIO(data), at_end

    def read(self, size: int = -1) -> bytes:
        chunk = self._data.read(size)
        if not chunk and self._at_end is not None:
            at_end, self._at_end = self._at_end, None
            at_end()
        return chunk


class ArtifactStoreContract(Actors, FamilyContract):
    """Every rule of an artifact store, checked on real transactions."""

    def make_store(self) -> Any:
        return self.family.artifacts

    @pytest.fixture
    def store(self, stores: Any) -> Any:
        return self.make_store()

    def chat_run(self, *, shared: bool = False) -> Any:
        return new_run(self.family, self.new_conversation(ALICE, shared=shared))

    def generation_run(self, conversation_id: Any = None) -> Any:
        return self.family.generations.create_or_resume(ALICE, id=uuid7(), slot="hero", kind="image",
                                                        conversation_id=conversation_id)

    def ids(self, page: Any) -> list[Any]:
        return [artifact.pk for artifact in page.items]

    # -- save, get, read --------------------------------------------------------------------------

    def test_save_for_a_chat_run(self, store: Any) -> None:
        run = self.chat_run()
        artifact = store.save(ALICE, run_id=run.pk, content=b"\x89PNG....", media_type="image/png", name="chart.png",
                              metadata={"width": 640})
        assert (artifact.run_id, artifact.generation_run_id, artifact.conversation_id) == (run.pk, None, run.conversation_id)
        assert (artifact.media_type, artifact.size, artifact.name, artifact.metadata) == ("image/png", 8, "chart.png",
                                                                                           {"width": 640})
        assert artifact.source_run_id == run.pk
        assert artifact.blob.key == f"artifacts/{run.pk}/{artifact.pk}"
        assert store.read(ALICE, artifact.pk).data == b"\x89PNG...."
        got = store.get(ALICE, str(artifact.pk))
        assert (got.pk, got.size, got.media_type, got.created_at) == (artifact.pk, 8, "image/png", artifact.created_at)

    def test_save_for_a_generation_run(self, store: Any) -> None:
        run = self.generation_run()
        artifact = store.save(ALICE, run_id=run.pk, content=io.BytesIO(b"RIFF...."), media_type="audio/wav")
        assert (artifact.generation_run_id, artifact.run_id, artifact.conversation_id) == (run.pk, None, None)
        assert self.ids(store.list_by_run(ALICE, run.pk)) == [artifact.pk]
        assert store.read(ALICE, artifact.pk, byte_range=ByteRange(suffix=4)).data == b"...."
        for scope in (BOB, MALLORY):
            with pytest.raises(NotFound):
                store.get(scope, artifact.pk)
        conversation = self.new_conversation(ALICE)
        filed = store.save(ALICE, run_id=self.generation_run(conversation.pk).pk, content=b"x")
        assert filed.conversation_id == conversation.pk
        assert self.ids(store.list_by_conversation(ALICE, conversation.pk)) == [filed.pk]

    def test_byte_ranges(self, store: Any) -> None:
        artifact = store.save(ALICE, run_id=self.chat_run().pk, content=b"0123456789")
        read = store.read(ALICE, artifact.pk, byte_range=ByteRange(2, 4))
        assert (read.offset, read.data, read.partial) == (2, b"234", True)
        with pytest.raises(RangeNotSatisfiable):
            store.read(ALICE, artifact.pk, byte_range=ByteRange(10))
        record, stream = store.open(ALICE, artifact.pk)
        with stream:
            assert stream.read() == b"0123456789" and record.size == 10

    def test_unknown_runs_and_bad_input_store_nothing(self, store: Any) -> None:
        before = self.family.stored_blobs()
        run = self.chat_run()
        for run_id in (uuid7(), "nope", None):
            with pytest.raises(NotFound) as caught:
                store.save(ALICE, run_id=run_id, content=b"x")
            assert caught.value.code == "run_not_found"
        for fields in ({"media_type": "image"}, {"media_type": "text/html\x00"}, {"name": "a\x00b"}, {"name": ".."},
                       {"metadata": [1]}, {"metadata": {"k": "\ud800"}}, {"content": "text"}):
            with pytest.raises(Validation):
                store.save(ALICE, **{"run_id": run.pk, "content": b"x", **fields})
        assert store.list_by_run(ALICE, run.pk).total == 0
        assert self.family.stored_blobs() == before

    @pytest.mark.django_db(transaction=True)
    def test_a_run_gone_while_the_bytes_were_read_stores_nothing(self, store: Any) -> None:
        before = self.family.stored_blobs()
        run = self.chat_run()
        owner_conversation = run.conversation_id
        stream = _StreamWithHook(b"late bytes", lambda: self.family.conversations.delete(ALICE, owner_conversation))
        with pytest.raises(NotFound):
            store.save(ALICE, run_id=run.pk, content=stream)
        assert self.family.stored_blobs() == before

    # -- access -------------------------------------------------------------------------------------

    def test_readers_read_owners_write(self, store: Any) -> None:
        run = self.chat_run(shared=True)
        artifact = store.save(ALICE, run_id=run.pk, content=b"x")
        assert store.get(BOB, artifact.pk).pk == artifact.pk
        assert self.ids(store.list_by_run(BOB, run.pk)) == [artifact.pk]
        assert self.ids(store.list_by_conversation(BOB, run.conversation_id)) == [artifact.pk]
        for write in (lambda: store.save(BOB, run_id=run.pk, content=b"y"), lambda: store.delete(BOB, artifact.pk),
                      lambda: store.delete_for_run(BOB, run.pk)):
            with pytest.raises(ConversationNotOwned):
                write()
        for read in (lambda: store.get(MALLORY, artifact.pk), lambda: store.list_by_run(MALLORY, run.pk),
                     lambda: store.list_by_conversation(MALLORY, run.conversation_id),
                     lambda: store.save(MALLORY, run_id=run.pk, content=b"y")):
            with pytest.raises(NotFound):
                read()
        private = self.chat_run()
        hidden = store.save(ALICE, run_id=private.pk, content=b"x")
        with pytest.raises(NotFound) as caught:
            store.get(BOB, hidden.pk)
        assert caught.value.code == "artifact_not_found"

    # -- listing --------------------------------------------------------------------------------------

    def test_lists_are_oldest_first_then_by_id(self, store: Any) -> None:
        run = self.chat_run()
        other = new_run(self.family, self.family.conversations.get(ALICE, run.conversation_id))
        with frozen_clock(timezone.now()):
            tied = [store.save(ALICE, run_id=run.pk, content=b"t") for _ in range(3)]
        later = store.save(ALICE, run_id=other.pk, content=b"l")
        assert self.ids(store.list_by_run(ALICE, run.pk)) == sorted(artifact.pk for artifact in tied)
        page = store.list_by_conversation(ALICE, run.conversation_id, limit=2, offset=2)
        assert (self.ids(page), page.total, page.has_more) == ([sorted(a.pk for a in tied)[2], later.pk], 4, False)
        with pytest.raises(Validation):
            store.list_by_run(ALICE, run.pk, limit=0)

    # -- deleting -------------------------------------------------------------------------------------

    @pytest.mark.django_db(transaction=True)
    def test_delete_removes_the_artifact_and_its_bytes(self, store: Any) -> None:
        before = self.family.stored_blobs()
        run = self.chat_run()
        artifact = store.save(ALICE, run_id=run.pk, content=b"x")
        key = artifact.blob.key
        store.delete(ALICE, artifact.pk)
        with pytest.raises(NotFound):
            store.get(ALICE, artifact.pk)
        with pytest.raises(NotFound):
            store.delete(ALICE, artifact.pk)
        assert self.family.blobs.head(ALICE.tenant, key) is None
        assert self.family.stored_blobs() == before

    @pytest.mark.django_db(transaction=True)
    def test_delete_for_run_removes_only_that_runs_artifacts(self, store: Any) -> None:
        run = self.chat_run()
        other = new_run(self.family, self.family.conversations.get(ALICE, run.conversation_id))
        for _ in range(3):
            store.save(ALICE, run_id=run.pk, content=b"x")
        kept = store.save(ALICE, run_id=other.pk, content=b"y")
        assert store.delete_for_run(ALICE, run.pk) == 3
        assert store.delete_for_run(ALICE, run.pk) == 0
        assert self.ids(store.list_by_conversation(ALICE, run.conversation_id)) == [kept.pk]

    @pytest.mark.django_db(transaction=True)
    def test_erasure_with_the_conversation_or_the_generation_run(self, store: Any) -> None:
        before = self.family.stored_blobs()
        run = self.chat_run()
        chat_artifact = store.save(ALICE, run_id=run.pk, content=b"chat")
        filed = store.save(ALICE, run_id=self.generation_run(run.conversation_id).pk, content=b"filed")
        generation = self.generation_run()
        own = store.save(ALICE, run_id=generation.pk, content=b"own")
        self.family.conversations.delete(ALICE, run.conversation_id)
        for artifact in (chat_artifact, filed):
            with pytest.raises(NotFound):
                store.get(ALICE, artifact.pk)
            assert self.family.blobs.head(ALICE.tenant, artifact.blob.key) is None
        assert store.read(ALICE, own.pk).data == b"own"
        self.family.generations.delete(ALICE, generation.pk)
        with pytest.raises(NotFound):
            store.get(ALICE, own.pk)
        assert self.family.stored_blobs() == before

    def test_async_twins(self, store: Any) -> None:
        run = self.chat_run()
        artifact = async_to_sync(store.asave)(ALICE, run_id=run.pk, content=b"twin")
        assert async_to_sync(store.aread)(ALICE, artifact.pk).data == b"twin"
        assert async_to_sync(store.aget)(ALICE, artifact.pk).size == 4
        assert [a.pk for a in async_to_sync(store.alist_by_run)(ALICE, run.pk).items] == [artifact.pk]
        assert async_to_sync(store.alist_by_conversation)(ALICE, run.conversation_id).total == 1
        assert async_to_sync(store.adelete_for_run)(ALICE, run.pk) == 1
