"""The backend-neutral rules of the blobs concern: what both store families check and build the same way.

The ORM store (:mod:`agent_persistence.stores.blobs`) and its in-memory twin
import these; nothing here reads or writes a table.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from typing import IO, Any

from django.utils import timezone

from ...conf import app_settings
from ...exceptions import RangeNotSatisfiable, Validation
from ...models import Blob
from ...models.artifacts import MAX_KEY_LENGTH
from .base import clean_text

_CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f]")


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


def clean_range(byte_range: Any) -> ByteRange | None:
    if byte_range is None or isinstance(byte_range, ByteRange):
        return byte_range
    raise Validation("byte_range must be a ByteRange.", code="invalid_range", field="byte_range")


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


def new_content_name() -> str:
    """A fresh name in the blob storage: the upload folder and a UUID, nothing of the caller's."""
    return f"{timezone.now().strftime(app_settings.BLOB_UPLOAD_TO)}{uuid.uuid4().hex}"


def read_range(stream: IO[bytes], blob: Blob, byte_range: ByteRange | None) -> BlobRead:
    offset, length = (0, blob.size) if byte_range is None else byte_range.resolve(blob.size)
    if offset:
        stream.seek(offset)
    return BlobRead(blob=blob, data=stream.read(length) if length else b"", offset=offset)
