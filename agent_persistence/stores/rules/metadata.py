"""The backend-neutral rules of the metadata concern: what both store families check and build the same way.

The ORM store (:mod:`agent_persistence.stores.metadata`) and its in-memory twin
import these; nothing here reads or writes a table.
"""

from __future__ import annotations

import json
from typing import Any

from ...conf import app_settings
from ...exceptions import Validation
from .base import clean_json, clean_text

MAX_NAME_LENGTH = 255


def clean_name(value: Any, field_name: str) -> str:
    """A namespace or a key: non-empty text of at most :data:`MAX_NAME_LENGTH` characters."""
    text = clean_text(value, field_name, max_length=MAX_NAME_LENGTH)
    assert text is not None
    if not text:
        raise Validation(f"{field_name} may not be empty.", field=field_name)
    return text


def encode_value(value: Any) -> tuple[Any, str, int]:
    """The value as JSON round-tripping gives it, its JSON text and its size in UTF-8 bytes."""
    cleaned = clean_json(value, "value", max_bytes=app_settings.MAX_STATE_BYTES)
    text = json.dumps(cleaned, ensure_ascii=False, separators=(",", ":"))
    return cleaned, text, len(text.encode())
