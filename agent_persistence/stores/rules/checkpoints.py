"""The backend-neutral rules of the checkpoints concern: what both store families check and build the same way.

The ORM store (:mod:`agent_persistence.stores.checkpoints`) and its in-memory twin
import these; nothing here reads or writes a table.
"""

from __future__ import annotations

import json
from typing import Any

import orjson
from django.core.serializers.json import DjangoJSONEncoder

from ... import json_policy
from ...conf import app_settings
from ...exceptions import StorageLimit, Validation


def encode_state(state: Any) -> tuple[str, int]:
    """The state's JSON text, encoded once, and its size in UTF-8 bytes (see :func:`encode_state_utf8`)."""
    encoded = encode_state_utf8(state)
    return encoded.decode(), len(encoded)


def encode_state_utf8(state: Any) -> bytes:
    """The state's JSON as UTF-8, encoded once.

    The JSON policy applies (no NUL or lone surrogate, bounded nesting,
    numbers in range: :func:`.json_policy.dumps`); the text is what is stored
    and what a load parses, so a load returns exactly what JSON round-tripping
    gives. Larger than ``MAX_STATE_BYTES`` is StorageLimit.
    """
    if not isinstance(state, dict):
        raise Validation("state must be a JSON object.", field="state")
    try:
        # orjson: the whole encoding in C, an order of magnitude faster than json.dumps on large states;
        # the policy's walk then needs to see only numbers and nesting (json_policy.dumps).
        encoded = json_policy.dumps(state, "state", default=_encode_other, option=ORJSON_OPTIONS)
    except (TypeError, orjson.JSONEncodeError) as exc:
        raise Validation(f"state is not JSON: {exc}.", field="state") from None
    limit = app_settings.MAX_STATE_BYTES
    if len(encoded) > limit:
        raise StorageLimit(f"state is larger than {limit} bytes.", field="state", limit=limit, size=len(encoded))
    return encoded


#: What json.dumps with Django's encoder would do: keys made text, dates and dataclasses left to that encoder.
ORJSON_OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS


def _encode_other(value: Any) -> Any:
    """Values JSON has no type for, as Django's encoder writes them (dates as ISO text, UUIDs, decimals)."""
    return DjangoJSONEncoder().default(value)


def clean_state(state: Any) -> tuple[dict[str, Any], int]:
    """The state as JSON round-tripping gives it, and its size in UTF-8 bytes."""
    text, size = encode_state(state)
    return json.loads(text), size
