"""The in-memory blob store: blob rows and their bytes, both in the family's memory.

Input is cleaned by the ORM store's functions (keys, prefixes, content types,
byte ranges, the size limit), and listings use the same code-point order, so
the contract suite cannot tell the two apart. No Django storage is touched; a
blob's ``content`` carries the name the ORM store would give it.
"""

from __future__ import annotations

import io
from typing import IO

from django.utils import timezone

from ...conf import app_settings
from ...exceptions import NotFound
from ...ids import uuid7
from ...models import Blob
from ..protocols import BlobStoreProtocol
from ..rules.blobs import (
    BlobPage,
    BlobRead,
    ByteRange,
    clean_custom_metadata,
    clean_key,
    clean_limit,
    clean_prefix,
    clean_range,
    clean_tenant,
    new_content_name,
    read_range,
)
from ..rules.files import Content, clean_content_type, spool_content
from ..twins import twins_of
from .database import DEFAULT_DATABASE, MemoryDatabase, clone


def read_content(content: Content) -> bytes:
    """The whole content, within ``MAX_BLOB_BYTES`` (the ORM store's spool, read back)."""
    data, _ = spool_content(content, app_settings.MAX_BLOB_BYTES)
    try:
        data.seek(0)
        return data.read()
    finally:
        data.close()


def write_blob(
    db: MemoryDatabase, tenant: str, key: str, payload: bytes, content_type: str,
    custom_metadata: dict[str, str] | None = None,
) -> Blob:
    """Point ``(tenant, key)`` at ``payload``, creating the blob or replacing its bytes (the caller holds the lock)."""
    now = timezone.now()
    blob = db.blobs.get((tenant, key))
    if blob is None:
        blob = db.blobs[(tenant, key)] = Blob(id=uuid7(), tenant=tenant, key=key, created_at=now)
    blob.content.name = new_content_name()
    blob.content_type, blob.size, blob.updated_at = content_type, len(payload), now
    blob.custom_metadata = dict(custom_metadata or {})
    db.blob_contents[blob.pk] = payload
    return blob


class MemoryBlobStore(twins_of(BlobStoreProtocol)):
    """Blobs in a :class:`MemoryDatabase`."""

    def __init__(self, database: MemoryDatabase | None = None) -> None:
        self.db = database or DEFAULT_DATABASE

    def put(
        self,
        tenant: str,
        key: str,
        content: Content,
        *,
        content_type: str | None = None,
        custom_metadata: dict[str, str] | None = None,
    ) -> Blob:
        tenant, key = clean_tenant(tenant), clean_key(key)
        content_type = clean_content_type(content_type)
        custom_metadata = clean_custom_metadata(custom_metadata)
        payload = read_content(content)
        with self.db.lock:
            return clone(write_blob(self.db, tenant, key, payload, content_type, custom_metadata))

    def head(self, tenant: str, key: str) -> Blob | None:
        tenant, key = clean_tenant(tenant), clean_key(key)
        with self.db.lock:
            blob = self.db.blobs.get((tenant, key))
            return None if blob is None else clone(blob)

    def open(self, tenant: str, key: str) -> tuple[Blob, IO[bytes]]:
        tenant, key = clean_tenant(tenant), clean_key(key)
        with self.db.lock:
            blob = self.db.blobs.get((tenant, key))
            if blob is None:
                raise NotFound("No such blob.", code="blob_not_found")
            return clone(blob), io.BytesIO(self.db.blob_contents[blob.pk])

    def get(self, tenant: str, key: str, *, byte_range: ByteRange | None = None) -> BlobRead:
        byte_range = clean_range(byte_range)
        blob, stream = self.open(tenant, key)
        with stream:
            return read_range(stream, blob, byte_range)

    def delete(self, tenant: str, key: str) -> bool:
        tenant, key = clean_tenant(tenant), clean_key(key)
        with self.db.lock:
            return self.db.delete_blob(tenant, key)

    def list(self, tenant: str, *, prefix: str = "", cursor: str | None = None, limit: int | None = None) -> BlobPage:
        tenant, prefix, limit = clean_tenant(tenant), clean_prefix(prefix), clean_limit(limit)
        after = None if cursor is None else clean_key(cursor, "cursor")
        if limit == 0:
            return BlobPage()
        with self.db.lock:
            keys = sorted(
                key
                for blob_tenant, key in self.db.blobs
                if blob_tenant == tenant and key.startswith(prefix) and (after is None or key > after)
            )
            items = [clone(self.db.blobs[(tenant, key)]) for key in keys[:limit]]
        return BlobPage(items=items, next_cursor=items[-1].key if len(keys) > limit else None)
