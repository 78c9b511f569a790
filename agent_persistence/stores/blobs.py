"""The blob store: bytes under keys the caller chooses, per tenant, through Django's storage API.

A key is text such as ``"artifacts/<run>/<id>"`` or ``"exports/2026/report.pdf"``:
"/"-separated segments, none empty, none ``.`` or ``..``, no backslash, no
control character, at most 1024 characters (:func:`clean_key`). The key is
kept in a :class:`~agent_persistence.models.Blob` row; the bytes go to the
storage chosen by ``AGENT_PERSISTENCE["BLOB_STORAGE"]`` under a name of the
app's own (``BLOB_UPLOAD_TO`` and a fresh UUID per write), so no key, however
hostile, names a path of the storage.

``put`` writes the new bytes first, then points the row at them in one
transaction and removes the bytes it replaced once that commits; a reader sees
the old bytes or the new ones, never a mix, and concurrent puts of one key
leave one row and one object. A deleted row's bytes go once the deletion
commits (the ``post_delete`` receiver in :mod:`agent_persistence.receivers`),
so a rolled-back delete keeps them.

``list`` is a literal, case-sensitive prefix match in ascending key order, by
a range scan on a byte-ordered column (never ``LIKE``, whose ``%`` and ``_``
are wildcards and which SQLite folds to one case), paged by a cursor: the last
key of the previous page.
"""

from __future__ import annotations

import logging
import re
from typing import IO, Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from ..conf import app_settings
from ..exceptions import Conflict, NotFound
from ..models import Blob
from ..models.artifacts import blob_storage
from .files import Content, clean_content_type, spool_content
from .protocols import BlobStoreProtocol
from .rules.blobs import (  # re-exported: these rules moved to agent_persistence/stores/rules/blobs.py
    MAX_CUSTOM_METADATA_KEY as MAX_CUSTOM_METADATA_KEY,
    MAX_CUSTOM_METADATA_PAIRS as MAX_CUSTOM_METADATA_PAIRS,
    MAX_CUSTOM_METADATA_VALUE as MAX_CUSTOM_METADATA_VALUE,
    _CONTROL_CHARACTERS as _CONTROL_CHARACTERS,
    _clean_key_text as _clean_key_text,
)
from .rules.blobs import (
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
from .twins import twins_of

logger = logging.getLogger(__name__)

# The highest code point; a prefix made only of it has no upper bound.
_LAST_CODE_POINT = 0x10FFFF


# -- cleaning input ---------------------------------------------------------------------------


def prefix_upper_bound(prefix: str) -> str | None:
    """The least text above every text that starts with ``prefix``; None when there is none.

    With code-point (byte) order, ``prefix <= key < bound`` is exactly
    ``key.startswith(prefix)``: the last code point below the maximum is raised
    by one (stepping over the surrogates, which no key holds) and what follows
    it is dropped.
    """
    stripped = prefix.rstrip(chr(_LAST_CODE_POINT))
    if not stripped:
        return None
    following = ord(stripped[-1]) + 1
    if 0xD800 <= following <= 0xDFFF:
        following = 0xE000
    return stripped[:-1] + chr(following)


# -- byte ranges ------------------------------------------------------------------------------


_RANGE_HEADER = re.compile(r"bytes[ \t]*=[ \t]*(?:(\d{1,30})[ \t]*-[ \t]*(\d{0,30})|-[ \t]*(\d{1,30}))[ \t]*")


def parse_range_header(value: str | None) -> ByteRange | None:
    """The single byte range of a ``Range`` header; None for anything this app serves whole instead.

    RFC 9110 lets a server ignore a Range it does not support: another unit,
    several ranges, or text that is not a range at all (``bytes=5-1``
    included) get the whole content (200), not an error.
    """
    if not value or len(value) > 200:
        return None
    match = _RANGE_HEADER.fullmatch(value)
    if match is None:
        return None
    first, last, suffix = match.groups()
    if suffix is not None:
        return ByteRange(suffix=int(suffix))
    if last and int(last) < int(first):
        return None
    return ByteRange(int(first), int(last) if last else None)


# -- values -------------------------------------------------------------------------------------


# -- content in the storage -----------------------------------------------------------------------


def store_content(content: Content) -> tuple[str, int]:
    """Write ``content`` (within ``MAX_BLOB_BYTES``) to the blob storage; its name there and its size."""
    data, size = spool_content(content, app_settings.MAX_BLOB_BYTES)
    try:
        return blob_storage().save(new_content_name(), data), size
    finally:
        data.close()


def discard_content(name: str) -> None:
    """Take bytes back out of the storage (a write that was never committed)."""
    try:
        blob_storage().delete(name)
    except OSError:
        logger.warning("Could not take back the blob content %s", name, exc_info=True)


def delete_content_on_commit(storage: Any, name: str) -> None:
    """Remove ``name`` from ``storage`` once the current transaction commits (at once outside one)."""

    def remove() -> None:
        try:
            storage.delete(name)
        except OSError:
            logger.warning("Could not delete the blob content %s", name, exc_info=True)

    transaction.on_commit(remove)


def write_blob(
    tenant: str, key: str, name: str, content_type: str, size: int, custom_metadata: dict[str, str] | None = None
) -> Blob:
    """Point ``(tenant, key)`` at the stored ``name``, creating the row or replacing what it held.

    Runs in the caller's transaction (or its own). The replaced bytes are
    removed once it commits. Two writers of a new key race on the unique
    constraint: the loser finds the winner's row and replaces it.
    """
    with transaction.atomic():
        now, custom_metadata = timezone.now(), custom_metadata or {}
        for _ in range(2):
            existing = Blob.objects.select_for_update().filter(tenant=tenant, key=key).first()
            if existing is not None:
                replaced = existing.content.name
                Blob.objects.filter(pk=existing.pk).update(
                    content=name, content_type=content_type, size=size, custom_metadata=custom_metadata, updated_at=now
                )
                if replaced and replaced != name:
                    delete_content_on_commit(existing.content.storage, replaced)
                existing.content.name, existing.content_type, existing.size, existing.updated_at = name, content_type, size, now
                existing.custom_metadata = custom_metadata
                return existing
            try:
                with transaction.atomic():
                    return Blob.objects.create(
                        tenant=tenant, key=key, content=name, content_type=content_type, size=size,
                        custom_metadata=custom_metadata, created_at=now, updated_at=now,
                    )
            except IntegrityError:
                continue  # another writer inserted the key since we looked: replace its row
        raise Conflict("The blob could not be stored; retry.", code="blob_conflict")


def open_blob(blob: Blob) -> IO[bytes]:
    """The blob's bytes, opened for binary reading; FileNotFoundError when the storage lost them."""
    return blob.content.storage.open(blob.content.name, "rb")


# -- the store ----------------------------------------------------------------------------------


class BlobStore(twins_of(BlobStoreProtocol)):
    """Bytes under caller keys, per tenant: rows through the ORM, bytes through Django's storage API."""

    def put(
        self,
        tenant: str,
        key: str,
        content: Content,
        *,
        content_type: str | None = None,
        custom_metadata: dict[str, str] | None = None,
    ) -> Blob:
        """Store ``content`` under ``key``, replacing what the key held (its custom metadata too); the blob's row.

        Everything is checked before the storage is touched; a put that fails
        leaves the key as it was and no bytes behind.
        """
        tenant, key = clean_tenant(tenant), clean_key(key)
        content_type = clean_content_type(content_type)
        custom_metadata = clean_custom_metadata(custom_metadata)
        name, size = store_content(content)
        try:
            return write_blob(tenant, key, name, content_type, size, custom_metadata)
        except BaseException:
            discard_content(name)
            raise

    def head(self, tenant: str, key: str) -> Blob | None:
        """The blob's row (size, content type, custom metadata, times) without its bytes; None when absent."""
        tenant, key = clean_tenant(tenant), clean_key(key)
        return Blob.objects.filter(tenant=tenant, key=key).first()

    def open(self, tenant: str, key: str) -> tuple[Blob, IO[bytes]]:
        """The blob's row and its bytes opened for reading (the caller closes them); NotFound when absent.

        The two match: a put that replaced the bytes between the read of the row
        and the open (and so removed the old ones) makes it read the row again.
        """
        for _ in range(3):
            blob = self.head(tenant, key)
            if blob is None:
                raise NotFound("No such blob.", code="blob_not_found")
            try:
                return blob, open_blob(blob)
            except FileNotFoundError:
                continue
        logger.warning("The content of blob %s is missing from its storage", blob.pk)
        raise NotFound("The content of this blob is missing.", code="blob_content_missing")

    def get(self, tenant: str, key: str, *, byte_range: ByteRange | None = None) -> BlobRead:
        """The blob's bytes (only ``byte_range`` of them when given); NotFound, RangeNotSatisfiable."""
        byte_range = clean_range(byte_range)
        blob, stream = self.open(tenant, key)
        with stream:
            return read_range(stream, blob, byte_range)

    def delete(self, tenant: str, key: str) -> bool:
        """Delete the blob (and an artifact made of it); its bytes go once that commits. Whether it existed."""
        tenant, key = clean_tenant(tenant), clean_key(key)
        with transaction.atomic():
            _, deleted = Blob.objects.filter(tenant=tenant, key=key).delete()
        return deleted.get(Blob._meta.label, 0) > 0

    def list(self, tenant: str, *, prefix: str = "", cursor: str | None = None, limit: int | None = None) -> BlobPage:
        """The blobs whose key starts with ``prefix`` (literally, case-sensitively), in ascending key order.

        ``cursor`` is the ``next_cursor`` of the previous page: the listing
        goes on strictly after that key.
        """
        tenant, prefix, limit = clean_tenant(tenant), clean_prefix(prefix), clean_limit(limit)
        blobs = Blob.objects.filter(tenant=tenant, key__gte=prefix)
        upper = prefix_upper_bound(prefix)
        if upper is not None:
            blobs = blobs.filter(key__lt=upper)
        if cursor is not None:
            blobs = blobs.filter(key__gt=clean_key(cursor, "cursor"))
        if limit == 0:
            return BlobPage()
        found = list(blobs.order_by("key")[: limit + 1])
        items = found[:limit]
        return BlobPage(items=items, next_cursor=items[-1].key if len(found) > limit else None)
