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
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.utils import timezone

from ..exceptions import Conflict, ConversationNotOwned, NotFound, RangeNotSatisfiable, Validation
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

    # -- record-only saves (TanStack's artifacts.save(record)) --------------------------------------

    def test_a_record_only_save_under_the_callers_id_points_at_a_blob(self, store: Any) -> None:
        run = self.chat_run()
        key = f"uploads/{run.pk}/hero.png"
        self.family.blobs.put(ALICE.tenant, key, b"\x89PNG", content_type="image/png")
        artifact_id, created_at = uuid7(), timezone.now() - timedelta(minutes=5)
        before = self.family.stored_blobs()
        record = store.save_record(ALICE, id=str(artifact_id), run_id=run.pk, blob_key=key, media_type="image/png",
                                   name="hero.png", metadata={"w": 1}, created_at=created_at)
        assert (record.pk, record.blob_key, record.source_url, record.created_at) == (artifact_id, key, "", created_at)
        assert (record.run_id, record.conversation_id, record.media_type, record.size) == (
            run.pk, run.conversation_id, "image/png", 4)
        got = store.get(ALICE, artifact_id)
        assert (got.pk, got.blob_key, got.created_at, got.name, got.metadata) == (artifact_id, key, created_at,
                                                                                   "hero.png", {"w": 1})
        assert store.read(ALICE, artifact_id).data == b"\x89PNG"
        assert store.read(ALICE, artifact_id, byte_range=ByteRange(1, 2)).data == b"PN"
        assert self.ids(store.list_by_run(ALICE, run.pk)) == [artifact_id]
        assert self.family.stored_blobs() == before  # the record adds no bytes
        # Insert-if-absent: the same id again returns the stored record unchanged.
        again = store.save_record(ALICE, id=artifact_id, run_id=run.pk, source_url="https://cdn.example/other.png")
        assert (again.blob_key, again.source_url, again.created_at) == (key, "", created_at)
        # The blob is the caller's: deleting the record keeps it.
        store.delete(ALICE, artifact_id)
        with pytest.raises(NotFound):
            store.get(ALICE, artifact_id)
        assert self.family.blobs.get(ALICE.tenant, key).data == b"\x89PNG"

    def test_a_record_only_save_with_a_source_url_or_a_missing_blob(self, store: Any) -> None:
        run = self.generation_run()
        hosted = store.save_record(ALICE, id=uuid7(), run_id=run.pk, source_url="https://cdn.example/a.mp4",
                                   media_type="video/mp4", size=1234)
        assert (hosted.source_url, hosted.blob_key, hosted.size, hosted.generation_run_id) == (
            "https://cdn.example/a.mp4", "", 1234, run.pk)
        assert store.get(ALICE, hosted.pk).source_url == "https://cdn.example/a.mp4"
        with pytest.raises(NotFound) as caught:
            store.read(ALICE, hosted.pk)
        assert caught.value.code == "artifact_content_external"
        assert caught.value.details["source_url"] == "https://cdn.example/a.mp4"
        later = store.save_record(ALICE, id=uuid7(), run_id=run.pk, blob_key="not/yet/put")
        assert later.size is None
        with pytest.raises(NotFound) as caught:
            store.read(ALICE, later.pk)
        assert caught.value.code == "artifact_content_missing"
        self.family.blobs.put(ALICE.tenant, "not/yet/put", b"now")
        assert store.read(ALICE, later.pk).data == b"now"
        for scope in (BOB, MALLORY):
            with pytest.raises(NotFound):
                store.get(scope, hosted.pk)

    def test_a_bad_record_only_save_stores_nothing(self, store: Any) -> None:
        run = self.chat_run(shared=True)
        taken = store.save_record(ALICE, id=uuid7(), run_id=run.pk, blob_key="k")
        cases = [
            ({}, Validation, "invalid", "blob_key"),
            ({"blob_key": "../x"}, Validation, "invalid_key", "blob_key"),
            ({"blob_key": "a//b"}, Validation, "invalid_key", "blob_key"),
            ({"source_url": "ftp://example.com/a"}, Validation, "invalid", "source_url"),
            ({"source_url": "javascript:alert(1)"}, Validation, "invalid", "source_url"),
            ({"source_url": "https://example.com/" + "a" * 2048}, Validation, "invalid", "source_url"),
            ({"source_url": 5}, Validation, "invalid", "source_url"),
            ({"blob_key": "k", "id": "nope"}, Validation, "invalid_id", "id"),
            ({"blob_key": "k", "size": -1}, Validation, "invalid", "size"),
            ({"blob_key": "k", "size": True}, Validation, "invalid", "size"),
            ({"blob_key": "k", "media_type": "image"}, Validation, "invalid", None),
            ({"blob_key": "k", "created_at": timezone.now() + timedelta(days=1)}, Validation, "future_time", "created_at"),
            ({"blob_key": "k", "run_id": uuid7()}, NotFound, "run_not_found", None),
        ]
        for fields, error, code, field in cases:
            arguments = {"id": uuid7(), "run_id": run.pk, **fields}
            with pytest.raises(error) as caught:
                store.save_record(ALICE, **arguments)
            assert caught.value.code == code, (fields, caught.value.code)
            if field is not None:
                assert caught.value.details.get("field") == field, (fields, caught.value.details)
        with pytest.raises(ConversationNotOwned):
            store.save_record(BOB, id=uuid7(), run_id=run.pk, blob_key="k")
        bobs_run = self.family.generations.create_or_resume(BOB, id=uuid7(), slot="s", kind="image")
        with pytest.raises(Conflict) as caught:
            store.save_record(BOB, id=taken.pk, run_id=bobs_run.pk, blob_key="k")
        assert caught.value.code == "artifact_id_taken"
        assert self.ids(store.list_by_run(ALICE, run.pk)) == [taken.pk]
        assert store.list_by_run(BOB, bobs_run.pk).total == 0

    def test_async_twins(self, store: Any) -> None:
        run = self.chat_run()
        record = async_to_sync(store.asave_record)(ALICE, id=uuid7(), run_id=run.pk, source_url="https://x.example/a")
        assert async_to_sync(store.aget)(ALICE, record.pk).source_url == "https://x.example/a"
        artifact = async_to_sync(store.asave)(ALICE, run_id=run.pk, content=b"twin")
        assert async_to_sync(store.aread)(ALICE, artifact.pk).data == b"twin"
        assert async_to_sync(store.aget)(ALICE, artifact.pk).size == 4
        assert [a.pk for a in async_to_sync(store.alist_by_run)(ALICE, run.pk).items] == [record.pk, artifact.pk]
        assert async_to_sync(store.alist_by_conversation)(ALICE, run.conversation_id).total == 2
        assert async_to_sync(store.adelete_for_run)(ALICE, run.pk) == 2
