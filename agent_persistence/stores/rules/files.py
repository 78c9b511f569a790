"""The backend-neutral rules of the files concern: what both store families check and build the same way.

The ORM store (:mod:`agent_persistence.stores.files`) and its in-memory twin
import these; nothing here reads or writes a table.
"""

from __future__ import annotations

import os
import re
from tempfile import SpooledTemporaryFile
from typing import IO, Any

from django.core.files.base import ContentFile, File

from ...conf import MIB, app_settings
from ...exceptions import StorageLimit, Validation

DEFAULT_CONTENT_TYPE = "application/octet-stream"


MAX_NAME_LENGTH = 255


MAX_CONTENT_TYPE_LENGTH = 255


READ_CHUNK_BYTES = 64 * 1024


# Content up to this size is checked in memory; larger content spills to a temporary file.
SPOOL_MEMORY_BYTES = 1 * MIB


# RFC 6838 type/subtype, then optional RFC 9110 parameters (`; charset=utf-8`).
_TOKEN = r"[A-Za-z0-9!#$%&'*+.^_`|~-]+"


_CONTENT_TYPE = re.compile(
    rf"{_TOKEN}/{_TOKEN}(?:[ \t]*;[ \t]*{_TOKEN}=(?:{_TOKEN}|\"(?:[^\"\\\x00-\x1f\x7f]|\\[^\x00-\x1f\x7f])*\"))*"
)


_CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f]")


Content = bytes | bytearray | memoryview | File | IO[bytes]


def clean_file_name(name: Any) -> str:
    """The base name of a client's file name: no folders, no control characters, 1..255 chars."""
    if not isinstance(name, str):
        raise Validation("name must be a string.", field="name")
    # A browser may send a whole Windows or POSIX path; only its last part names the file.
    base_name = re.split(r"[\\/]", name)[-1].strip()
    if base_name in ("", ".", ".."):
        raise Validation("name must name a file.", field="name")
    if _CONTROL_CHARACTERS.search(base_name):
        raise Validation("name may not contain control characters.", field="name")
    if len(base_name) > MAX_NAME_LENGTH:
        raise Validation(f"name is longer than {MAX_NAME_LENGTH} characters.", field="name")
    return base_name


def clean_content_type(content_type: Any) -> str:
    """A media type such as ``text/plain; charset=utf-8``; ``None`` is the default."""
    if content_type is None:
        return DEFAULT_CONTENT_TYPE
    if not isinstance(content_type, str):
        raise Validation("content_type must be a string.", field="content_type")
    if len(content_type) > MAX_CONTENT_TYPE_LENGTH or not _CONTENT_TYPE.fullmatch(content_type):
        raise Validation("content_type must be a media type such as 'text/plain'.", field="content_type")
    return content_type


def clean_sweep_limit(limit: Any) -> int:
    if limit is None:
        return app_settings.SWEEP_BATCH_SIZE
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise Validation("limit must be a whole number, 1 or more.", field="limit")
    return limit


def _refuse_size(size: int, limit: int) -> None:
    if size > limit:
        raise StorageLimit(f"The file is larger than {limit} bytes.", field="content", limit=limit)


def _known_size(content: Any) -> int | None:
    """The number of bytes a read will give, when the source can tell without reading."""
    if isinstance(content, File):
        try:
            return int(content.size)
        except (AttributeError, TypeError, ValueError, OSError):
            return None
    try:
        if not content.seekable():
            return None
        here = content.tell()
        end = content.seek(0, os.SEEK_END)
        content.seek(here)
        return end - here
    except (AttributeError, OSError, ValueError):
        return None


def _rewind(content: File) -> None:
    # A Django File is read from its start, as File.chunks() and the storages do.
    try:
        content.seek(0)
    except (AttributeError, OSError, ValueError):
        pass


def spool_content(content: Any, limit: int) -> tuple[File, int]:
    """The content as a File ready for the storage, and its size; StorageLimit past ``limit``.

    Bytes are checked by length. A file or stream is checked by its size when
    it can tell, then read in chunks that never go more than one byte past the
    limit, so an endless stream costs at most ``limit + 1`` bytes.
    """
    if isinstance(content, (bytes, bytearray, memoryview)):
        data = bytes(content)
        _refuse_size(len(data), limit)
        return ContentFile(data), len(data)
    if isinstance(content, str) or not hasattr(content, "read"):
        raise Validation("content must be bytes or a binary file.", field="content")
    known = _known_size(content)
    if known is not None:
        _refuse_size(known, limit)
    if isinstance(content, File):
        _rewind(content)
    spool = SpooledTemporaryFile(max_size=SPOOL_MEMORY_BYTES)
    try:
        size = _copy_within_limit(content, spool, limit)
    except BaseException:
        spool.close()
        raise
    spool.seek(0)
    return File(spool), size


def _copy_within_limit(source: Any, target: IO[bytes], limit: int) -> int:
    size = 0
    while True:
        chunk = source.read(min(READ_CHUNK_BYTES, limit + 1 - size))
        if not chunk:
            return size
        if not isinstance(chunk, (bytes, bytearray, memoryview)):
            raise Validation("content must be opened in binary mode.", field="content")
        size += len(chunk)
        _refuse_size(size, limit)
        target.write(chunk)
