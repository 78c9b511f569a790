"""The contract of a blob store, as a pytest class a custom backend can subclass.

::

    from agent_persistence.testing.blobs import BlobStoreContract

    class TestMyBlobStore(BlobStoreContract):
        def make_store(self):
            return MyBlobStore()

Everything is asserted through the store API, except that no bytes are left
behind, which is asked of the family (``stored_blobs``).
"""

from __future__ import annotations

import io
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.conf import settings
from django.test import override_settings

from ..exceptions import NotFound, RangeNotSatisfiable, StorageLimit, Validation
from ..stores.blobs import ByteRange
from .actors import Actors
from .concurrency import run_in_threads
from .family import FamilyContract

TENANT = "acme"
#: Keys no blob store may accept: each is Validation("invalid_key") and stores nothing.
HOSTILE_KEYS = [
    "", "/a", "a/", "a//b", "..", ".", "../x", "a/../b", "a/./b", "a\\b", "..\\x", "a\x00b", "a\nb", "a\x7fb",
    "\ud800", "x" * 1025, 5, None, b"bytes",
]
PUT_RACE_WRITERS = 6


class BlobStoreContract(Actors, FamilyContract):
    """Every rule of a blob store, checked on real transactions."""

    def make_store(self) -> Any:
        return self.family.blobs

    @pytest.fixture
    def store(self, stores: Any) -> Any:
        return self.make_store()

    def keys(self, page: Any) -> list[str]:
        return [blob.key for blob in page.items]

    def all_keys(self, store: Any, prefix: str = "", *, limit: int = 2) -> list[str]:
        """Every key under ``prefix``, walked page by page with the cursor."""
        keys, cursor = [], None
        while True:
            page = store.list(TENANT, prefix=prefix, cursor=cursor, limit=limit)
            keys += self.keys(page)
            if page.next_cursor is None:
                return keys
            cursor = page.next_cursor

    # -- put, get, head, delete -----------------------------------------------------------------

    def test_put_then_get_and_head(self, store: Any) -> None:
        blob = store.put(TENANT, "reports/q1.pdf", b"%PDF-1.7", content_type="application/pdf")
        assert (blob.key, blob.size, blob.content_type) == ("reports/q1.pdf", 8, "application/pdf")
        read = store.get(TENANT, "reports/q1.pdf")
        assert (read.data, read.offset, read.partial) == (b"%PDF-1.7", 0, False)
        head = store.head(TENANT, "reports/q1.pdf")
        assert (head.size, head.content_type) == (8, "application/pdf")
        blob_row, stream = store.open(TENANT, "reports/q1.pdf")
        with stream:
            assert stream.read() == b"%PDF-1.7" and blob_row.size == 8

    def test_custom_metadata_is_kept_by_put_and_returned_by_get_head_and_list(self, store: Any) -> None:
        metadata = {"origin": "upload", "sha256": "ab12", "é": ""}
        assert store.put(TENANT, "m/1", b"x", custom_metadata=metadata).custom_metadata == metadata
        assert store.head(TENANT, "m/1").custom_metadata == metadata
        assert store.get(TENANT, "m/1").blob.custom_metadata == metadata
        blob_row, stream = store.open(TENANT, "m/1")
        stream.close()
        assert blob_row.custom_metadata == metadata
        assert [blob.custom_metadata for blob in store.list(TENANT, prefix="m/").items] == [metadata]
        store.put(TENANT, "m/1", b"y", custom_metadata={"origin": "edit"})
        assert store.head(TENANT, "m/1").custom_metadata == {"origin": "edit"}
        store.put(TENANT, "m/1", b"z")
        assert store.head(TENANT, "m/1").custom_metadata == {}

    def test_bad_custom_metadata_is_refused_and_keeps_the_blob(self, store: Any) -> None:
        before = self.family.stored_blobs()
        store.put(TENANT, "m/kept", b"old", custom_metadata={"a": "1"})
        for metadata in ([("a", "1")], {"a": 1}, {"a": None}, {1: "a"}, {"a": "\x00"}, "a=1", {"": "x"},
                         {"k" * 257: "v"}, {"k": "v" * 2049}, {f"k{i}": "v" for i in range(65)}):
            with pytest.raises(Validation) as caught:
                store.put(TENANT, "m/kept", b"new", custom_metadata=metadata)
            assert (caught.value.code, caught.value.details.get("field")) == ("invalid", "custom_metadata"), metadata
        assert store.get(TENANT, "m/kept").data == b"old"
        assert store.head(TENANT, "m/kept").custom_metadata == {"a": "1"}
        assert len(self.family.stored_blobs() - before) == 1

    @pytest.mark.django_db(transaction=True)
    def test_put_overwrites_and_keeps_one_copy_of_the_bytes(self, store: Any) -> None:
        before = self.family.stored_blobs()
        store.put(TENANT, "k", b"first", content_type="text/plain")
        store.put(TENANT, "k", io.BytesIO(b"second!"))
        assert store.get(TENANT, "k").data == b"second!"
        assert store.head(TENANT, "k").content_type == "application/octet-stream"
        assert self.keys(store.list(TENANT, prefix="k")) == ["k"]
        assert len(self.family.stored_blobs() - before) == 1

    def test_absent_keys(self, store: Any) -> None:
        assert store.head(TENANT, "nothing/here") is None
        with pytest.raises(NotFound) as caught:
            store.get(TENANT, "nothing/here")
        assert caught.value.code == "blob_not_found"
        assert store.delete(TENANT, "nothing/here") is False

    @pytest.mark.django_db(transaction=True)
    def test_delete_removes_the_row_and_the_bytes(self, store: Any) -> None:
        before = self.family.stored_blobs()
        store.put(TENANT, "doomed", b"bytes")
        assert store.delete(TENANT, "doomed") is True
        assert store.head(TENANT, "doomed") is None
        assert self.family.stored_blobs() == before

    def test_tenants_are_apart(self, store: Any) -> None:
        store.put(TENANT, "same/key", b"acme's")
        store.put("other", "same/key", b"other's")
        assert store.get(TENANT, "same/key").data == b"acme's"
        assert store.get("other", "same/key").data == b"other's"
        store.delete("other", "same/key")
        assert store.get(TENANT, "same/key").data == b"acme's"
        assert self.keys(store.list("other")) == []

    def test_the_size_limit_stores_nothing(self, store: Any) -> None:
        before = self.family.stored_blobs()
        with override_settings(AGENT_PERSISTENCE={**getattr(settings, "AGENT_PERSISTENCE", {}), "MAX_BLOB_BYTES": 4}):
            with pytest.raises(StorageLimit):
                store.put(TENANT, "big", b"12345")
            store.put(TENANT, "small", b"1234")
        assert store.head(TENANT, "big") is None
        assert len(self.family.stored_blobs() - before) == 1

    @pytest.mark.parametrize("key", HOSTILE_KEYS, ids=repr)
    def test_hostile_keys_are_refused_and_store_nothing(self, store: Any, key: Any) -> None:
        before = self.family.stored_blobs()
        for call in (
            lambda: store.put(TENANT, key, b"x"),
            lambda: store.get(TENANT, key),
            lambda: store.head(TENANT, key),
            lambda: store.delete(TENANT, key),
        ):
            with pytest.raises(Validation) as caught:
                call()
            assert caught.value.code == "invalid_key"
        assert self.family.stored_blobs() == before

    def test_bad_content_and_content_types_are_refused(self, store: Any) -> None:
        for content, content_type in (("text", None), (b"x", "not a type"), (b"x", "text/plain\x00")):
            with pytest.raises(Validation):
                store.put(TENANT, "k", content, content_type=content_type)
        assert store.head(TENANT, "k") is None

    # -- byte ranges ----------------------------------------------------------------------------

    def test_byte_ranges_read_only_what_they_name(self, store: Any) -> None:
        store.put(TENANT, "digits", b"0123456789")
        cases = {
            ByteRange(0, 3): (0, b"0123"),
            ByteRange(7): (7, b"789"),
            ByteRange(8, 10**30): (8, b"89"),
            ByteRange(suffix=3): (7, b"789"),
            ByteRange(suffix=50): (0, b"0123456789"),
            ByteRange(9, 9): (9, b"9"),
        }
        for byte_range, (offset, data) in cases.items():
            read = store.get(TENANT, "digits", byte_range=byte_range)
            assert (read.offset, read.data) == (offset, data), byte_range
        assert store.get(TENANT, "digits", byte_range=ByteRange(0, 3)).partial is True

    def test_unsatisfiable_ranges(self, store: Any) -> None:
        store.put(TENANT, "digits", b"0123456789")
        store.put(TENANT, "empty", b"")
        for key, byte_range in (("digits", ByteRange(10)), ("digits", ByteRange(suffix=0)), ("empty", ByteRange(0)),
                                ("empty", ByteRange(suffix=1))):
            with pytest.raises(RangeNotSatisfiable) as caught:
                store.get(TENANT, key, byte_range=byte_range)
            assert caught.value.details["size"] == (10 if key == "digits" else 0)
        assert store.get(TENANT, "empty").data == b""

    def test_malformed_ranges_are_refused(self, store: Any) -> None:
        store.put(TENANT, "digits", b"0123456789")
        for make in (lambda: ByteRange(5, 1), lambda: ByteRange(-1), lambda: ByteRange(), lambda: ByteRange(True),
                     lambda: ByteRange(1, 2, suffix=3)):
            with pytest.raises(Validation):
                make()
        with pytest.raises(Validation):
            store.get(TENANT, "digits", byte_range="bytes=0-1")

    # -- listing ----------------------------------------------------------------------------------

    def test_prefixes_match_literally_with_like_wildcards(self, store: Any) -> None:
        for key in ("a%b", "aXb", "a_c", "abc", "azz"):
            store.put(TENANT, key, b"x")
        assert self.all_keys(store, "a%") == ["a%b"]
        assert self.all_keys(store, "a_") == ["a_c"]
        assert self.all_keys(store, "a") == ["a%b", "aXb", "a_c", "abc", "azz"]

    def test_prefixes_are_case_sensitive_and_order_is_by_code_point(self, store: Any) -> None:
        for key in ("report", "Report", "reports/1", "é", "B", "a", "ab", "z\U0001f600"):
            store.put(TENANT, key, b"x")
        assert self.all_keys(store, "rep") == ["report", "reports/1"]
        assert self.all_keys(store, "Rep") == ["Report"]
        assert self.all_keys(store) == ["B", "Report", "a", "ab", "report", "reports/1", "z\U0001f600", "é"]

    def test_prefix_bounds_at_the_edges_of_unicode(self, store: Any) -> None:
        for key in ("x\ud7ff1", "x\ue000", "ab\U0010ffffz", "ac"):
            store.put(TENANT, key, b"x")
        assert self.all_keys(store, "x\ud7ff") == ["x\ud7ff1"]
        assert self.all_keys(store, "ab") == ["ab\U0010ffffz"]
        assert self.all_keys(store, "ab\U0010ffff") == ["ab\U0010ffffz"]

    def test_the_cursor_pages_through_every_key_once(self, store: Any) -> None:
        keys = [f"runs/{i:02d}" for i in range(7)]
        for key in reversed(keys):
            store.put(TENANT, key, b"x")
        store.put(TENANT, "runt", b"x")
        first = store.list(TENANT, prefix="runs/", limit=3)
        assert self.keys(first) == keys[:3] and first.next_cursor == keys[2]
        assert self.all_keys(store, "runs/", limit=3) == keys
        last = store.list(TENANT, prefix="runs/", cursor=keys[5], limit=3)
        assert self.keys(last) == keys[6:] and last.next_cursor is None

    def test_a_limit_of_zero_is_an_empty_page(self, store: Any) -> None:
        store.put(TENANT, "a/1", b"x")
        page = store.list(TENANT, prefix="a/", limit=0)
        assert (page.items, page.next_cursor) == ([], None)

    def test_bad_listing_arguments(self, store: Any) -> None:
        for arguments in ({"prefix": "a\x00"}, {"prefix": 3}, {"cursor": "../x"}, {"limit": -1}, {"limit": True},
                          {"limit": 1.5}, {"prefix": "x" * 1025}):
            with pytest.raises(Validation):
                store.list(TENANT, **arguments)

    # -- races and twins --------------------------------------------------------------------------

    @pytest.mark.django_db(transaction=True)
    def test_concurrent_puts_of_one_key_leave_one_blob_whole(self, store: Any) -> None:
        before = self.family.stored_blobs()
        payloads = [bytes([65 + index]) * (1000 + index) for index in range(PUT_RACE_WRITERS)]
        outcomes = run_in_threads(PUT_RACE_WRITERS, lambda index: store.put(TENANT, "raced", payloads[index]).key)
        assert outcomes == ["raced"] * PUT_RACE_WRITERS, outcomes
        assert store.get(TENANT, "raced").data in payloads
        assert self.keys(store.list(TENANT, prefix="raced")) == ["raced"]
        assert len(self.family.stored_blobs() - before) == 1

    def test_async_twins(self, store: Any) -> None:
        async_to_sync(store.aput)(TENANT, "async", b"twin")
        assert async_to_sync(store.aget)(TENANT, "async", byte_range=ByteRange(1)).data == b"win"
        assert async_to_sync(store.ahead)(TENANT, "async").size == 4
        assert [blob.key for blob in async_to_sync(store.alist)(TENANT).items] == ["async"]
        assert async_to_sync(store.adelete)(TENANT, "async") is True
