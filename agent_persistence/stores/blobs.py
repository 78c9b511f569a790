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
import uuid
from dataclasses import dataclass, field
from typing import IO, Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from ..conf import app_settings
from ..exceptions import Conflict, NotFound, RangeNotSatisfiable, Validation
from ..models import Blob
from ..models.artifacts import MAX_KEY_LENGTH, blob_storage
from .base import async_twin, clean_text
from .files import Content, clean_content_type, spool_content

logger = logging.getLogger(__name__)

_CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f]")
# The highest code point; a prefix made only of it has no upper bound.
_LAST_CODE_POINT = 0x10FFFF


# -- cleaning input ---------------------------------------------------------------------------


def clean_tenant(tenant: Any) -> str:
    return clean_text(tenant, "tenant", max_length=255) or ""


def _clean_key_text(value: Any, field_name: str, *, allow_empty: bool) -> str:
    if not isinstance(value, str):
        raise Validation(f"{field_name} must be a string.", code="invalid_key", field=field_name)
    if not value and not allow_empty:
        raise Validation(f"{field_name} may not be empty.", code="invalid_key", field=field_name)
    if len(value) > MAX_KEY_LENGTH:
        raise Validation(f"{field_name} is longer than {MAX_KEY_LENGTH} characters.", code="invalid_key", field=field_name)
    if _CONTROL_CHARACTERS.search(value) or any(0xD800 <= ord(char) <= 0xDFFF for char in value):
        raise Validation(f"{field_name} may not contain control characters or lone surrogates.", code="invalid_key",
                         field=field_name)
    if "\\" in value:
        raise Validation(f"{field_name} may not contain a backslash.", code="invalid_key", field=field_name)
    return value


def clean_key(key: Any, field_name: str = "key") -> str:
    """A blob key: "/"-separated segments, none empty, ``.`` or ``..``; Validation("invalid_key") otherwise."""
    key = _clean_key_text(key, field_name, allow_empty=False)
    if any(segment in ("", ".", "..") for segment in key.split("/")):
        raise Validation(
            f"{field_name} must be '/'-separated names, none empty, '.' or '..'.", code="invalid_key", field=field_name
        )
    return key


def clean_prefix(prefix: Any) -> str:
    """A listing prefix: any text a key may start with (``""`` lists every key)."""
    return _clean_key_text("" if prefix is None else prefix, "prefix", allow_empty=True)


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


def clean_limit(limit: Any) -> int:
    """A page size from 0 (an empty page, as TanStack's ``list({limit: 0})``) to ``MAX_PAGE_SIZE``."""
    if limit is None:
        return app_settings.DEFAULT_PAGE_SIZE
    if isinstance(limit, bool) or not isinstance(limit, int) or not 0 <= limit <= app_settings.MAX_PAGE_SIZE:
        raise Validation(f"limit must be a whole number from 0 to {app_settings.MAX_PAGE_SIZE}.", field="limit")
    return limit


#: At most this many custom metadata pairs per blob, keys of at most 256 and values of at most 2048 characters.
MAX_CUSTOM_METADATA_PAIRS = 64
MAX_CUSTOM_METADATA_KEY = 256
MAX_CUSTOM_METADATA_VALUE = 2048


def clean_custom_metadata(custom_metadata: Any) -> dict[str, str]:
    """Text keys to text values (TanStack's ``customMetadata: Record<string, string>``); None reads as ``{}``.

    Anything else is Validation("invalid", field ``custom_metadata``): a key
    that is empty or longer than 256 characters, a value longer than 2048,
    more than 64 pairs, control characters in a key, NUL or a lone surrogate anywhere.
    """
    if custom_metadata is None:
        return {}

    def refuse(why: str) -> Validation:
        return Validation(f"custom_metadata {why}.", field="custom_metadata")

    if not isinstance(custom_metadata, dict):
        raise refuse("must be an object of text keys to text values")
    if len(custom_metadata) > MAX_CUSTOM_METADATA_PAIRS:
        raise refuse(f"may hold at most {MAX_CUSTOM_METADATA_PAIRS} pairs")
    cleaned: dict[str, str] = {}
    for key, value in custom_metadata.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise refuse("must map text keys to text values")
        if not 1 <= len(key) <= MAX_CUSTOM_METADATA_KEY or _CONTROL_CHARACTERS.search(key):
            raise refuse(f"keys must be 1 to {MAX_CUSTOM_METADATA_KEY} characters, no control characters")
        if len(value) > MAX_CUSTOM_METADATA_VALUE:
            raise refuse(f"values may be at most {MAX_CUSTOM_METADATA_VALUE} characters")
        for text in (key, value):
            if "\x00" in text or any(0xD800 <= ord(char) <= 0xDFFF for char in text):
                raise refuse("may not contain NUL or lone surrogates")
        cleaned[key] = value
    return cleaned


# -- byte ranges ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ByteRange:
    """An HTTP byte range (RFC 9110 §14.1.2): bytes ``start`` to ``end`` inclusive, or the last ``suffix``.

    ``ByteRange(0, 99)`` is ``bytes=0-99``; ``ByteRange(100)`` is ``bytes=100-``
    (to the end); ``ByteRange(suffix=100)`` is ``bytes=-100`` (the last 100).
    """

    start: int | None = None
    end: int | None = None
    suffix: int | None = None

    def __post_init__(self) -> None:
        for name in ("start", "end", "suffix"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise Validation(f"A byte range's {name} must be a whole number, 0 or more.", code="invalid_range")
        if self.suffix is not None:
            if self.start is not None or self.end is not None:
                raise Validation("A suffix byte range has no start or end.", code="invalid_range")
        elif self.start is None:
            raise Validation("A byte range needs a start or a suffix.", code="invalid_range")
        elif self.end is not None and self.end < self.start:
            raise Validation("A byte range may not end before it starts.", code="invalid_range")

    def resolve(self, size: int) -> tuple[int, int]:
        """``(offset, length)`` of this range in ``size`` bytes; RangeNotSatisfiable when none of it is there."""
        if self.suffix is not None:
            if self.suffix == 0 or size == 0:
                raise RangeNotSatisfiable(size=size)
            length = min(self.suffix, size)
            return size - length, length
        assert self.start is not None
        if self.start >= size:
            raise RangeNotSatisfiable(size=size)
        last = size - 1 if self.end is None else min(self.end, size - 1)
        return self.start, last - self.start + 1


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


def clean_range(byte_range: Any) -> ByteRange | None:
    if byte_range is None or isinstance(byte_range, ByteRange):
        return byte_range
    raise Validation("byte_range must be a ByteRange.", code="invalid_range", field="byte_range")


# -- values -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BlobRead:
    """What ``get`` read: the blob's row, the bytes, and where they start in the whole blob."""

    blob: Blob
    data: bytes
    offset: int = 0

    @property
    def partial(self) -> bool:
        """Whether ``data`` is less than the whole blob."""
        return len(self.data) < self.blob.size


@dataclass(frozen=True)
class BlobPage:
    """One page of a prefix listing; ``next_cursor`` (the last key here) fetches the next, None at the end."""

    items: list[Blob] = field(default_factory=list)
    next_cursor: str | None = None


# -- content in the storage -----------------------------------------------------------------------


def new_content_name() -> str:
    """A fresh name in the blob storage: the upload folder and a UUID, nothing of the caller's."""
    return f"{timezone.now().strftime(app_settings.BLOB_UPLOAD_TO)}{uuid.uuid4().hex}"


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


def read_range(stream: IO[bytes], blob: Blob, byte_range: ByteRange | None) -> BlobRead:
    offset, length = (0, blob.size) if byte_range is None else byte_range.resolve(blob.size)
    if offset:
        stream.seek(offset)
    return BlobRead(blob=blob, data=stream.read(length) if length else b"", offset=offset)


# -- the store ----------------------------------------------------------------------------------


class BlobStore:
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

    aput = async_twin("put")
    ahead = async_twin("head")
    aopen = async_twin("open")
    aget = async_twin("get")
    adelete = async_twin("delete")
    alist = async_twin("list")
