"""The blob store against its contract, on the configured database and in memory; the Range header parser."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection, transaction

from agent_persistence.stores.blobs import ByteRange, parse_range_header, prefix_upper_bound
from agent_persistence.testing.blobs import TENANT, BlobStoreContract
from agent_persistence.testing.family import Stores, memory_stores


class TestBlobStore(BlobStoreContract):
    @pytest.mark.django_db
    def test_a_rolled_back_delete_keeps_the_bytes(self, store: Any) -> None:
        store.put(TENANT, "kept", b"bytes")
        with pytest.raises(RuntimeError), transaction.atomic():
            store.delete(TENANT, "kept")
            raise RuntimeError("roll back")
        assert store.get(TENANT, "kept").data == b"bytes"

    @pytest.mark.django_db
    def test_a_rolled_back_overwrite_keeps_the_old_bytes(self, store: Any) -> None:
        store.put(TENANT, "kept", b"old")
        with pytest.raises(RuntimeError), transaction.atomic():
            store.put(TENANT, "kept", b"new")
            raise RuntimeError("roll back")
        assert store.get(TENANT, "kept").data == b"old"

    @pytest.mark.django_db
    def test_storage_names_never_carry_the_key(self, store: Any) -> None:
        blob = store.put(TENANT, "reports/secret-name.pdf", b"x")
        assert "secret" not in blob.content.name and blob.content.name.startswith("agent_persistence/blobs/")


    @pytest.mark.django_db
    def test_keys_are_byte_ordered_on_postgresql_whatever_the_database_collation(self) -> None:
        """The key column carries the "C" collation, so range scans and ORDER BY follow code points."""
        if connection.vendor != "postgresql":
            pytest.skip("PostgreSQL only: SQLite compares text byte for byte by default")
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT collation_name FROM information_schema.columns WHERE table_name = %s AND column_name = %s",
                ["agent_persistence_blob", "key"],
            )
            assert cursor.fetchone() == ("C",)


class TestMemoryBlobStore(BlobStoreContract):
    def make_stores(self) -> Stores:
        return memory_stores()

    @pytest.fixture(autouse=True)
    def no_database(self, stores: Any, django_db_blocker: Any) -> Any:
        with django_db_blocker.block():
            yield


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("bytes=0-99", ByteRange(0, 99)),
        ("bytes=100-", ByteRange(100)),
        ("bytes=-5", ByteRange(suffix=5)),
        ("bytes = 1 - 2", ByteRange(1, 2)),
        ("bytes=0-99999999999999999999999999", ByteRange(0, 99999999999999999999999999)),
        ("bytes=5-1", None),
        ("bytes=0-1,4-5", None),
        ("items=0-1", None),
        ("bytes=", None),
        ("bytes=-", None),
        ("bytes=a-b", None),
        ("bytes=0-1\x00", None),
        ("bytes=" + "9" * 31 + "-", None),
        ("bytes=0-" + "1" * 300, None),
        ("", None),
        (None, None),
    ],
)
def test_range_headers(header: Any, expected: Any) -> None:
    """One byte range is served; anything else (RFC 9110 lets the server ignore it) is served whole."""
    assert parse_range_header(header) == expected


def test_prefix_upper_bounds() -> None:
    assert prefix_upper_bound("") is None
    assert prefix_upper_bound("ab") == "ac"
    assert prefix_upper_bound("a\U0010ffff") == "b"
    assert prefix_upper_bound("\U0010ffff") is None
    assert prefix_upper_bound("x\ud7ff") == "x\ue000"
