"""The backend-neutral rules of the base concern: what both store families check and build the same way.

The ORM stores (:mod:`agent_persistence.stores.base` re-exports these) and their in-memory twins
import these; nothing here reads or writes a table.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, Sequence, TypeVar

from django.core.serializers.json import DjangoJSONEncoder

from ... import json_policy
from ...conf import app_settings
from ...exceptions import ConversationNotOwned, NotFound, StorageLimit, Validation
from ...scope import Scope

T = TypeVar("T")


#: Marks an argument the caller did not pass (``None`` is a value: "clear it").
UNSET: Any = type("Unset", (), {"__repr__": lambda self: "UNSET", "__bool__": lambda self: False})()


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a listing.

    ``total`` counts the whole listing, or is None when the page was read
    without counting it (``with_total=False``, the default of cursor reads);
    ``has_more`` is then given by the reader (one row read past the page),
    otherwise it is ``offset + len(items) < total``.
    """

    items: list[T]
    total: int | None
    limit: int
    offset: int
    has_more: bool = None  # type: ignore[assignment]  # None: from total

    def __post_init__(self) -> None:
        if self.has_more is None:
            if self.total is None:
                raise TypeError("A page without a total needs has_more.")
            object.__setattr__(self, "has_more", self.offset + len(self.items) < self.total)


def parse_id(value: Any, what: str = "id") -> uuid.UUID:
    """A UUID from a UUID or its text; anything else is Validation(code="invalid_id")."""
    if isinstance(value, uuid.UUID):
        return value
    if isinstance(value, str):
        try:
            return uuid.UUID(value)
        except ValueError:
            pass
    raise Validation(f"{what} must be a UUID.", code="invalid_id", field=what)


def lookup_id(value: Any, what: str = "conversation") -> uuid.UUID:
    """A UUID to look up; a value that cannot be one names nothing, so it is NotFound."""
    try:
        return parse_id(value, what)
    except Validation:
        raise NotFound(f"No such {what}.") from None


def clean_json(value: Any, field_name: str, *, max_bytes: int | None = None) -> Any:
    """What ``json.loads(json.dumps(value))`` gives: dates become ISO text, tuples lists.

    The value is checked by the JSON policy first (:func:`agent_persistence.json_policy.check`:
    no NUL or lone surrogate, integers within 64 bits, finite numbers, nesting
    within ``JSON_MAX_DEPTH``), and so is what the encoder made of it. Values
    JSON cannot hold (NaN, sets, objects) are Validation; a value whose JSON is
    larger than ``max_bytes`` is StorageLimit.
    """
    json_policy.check(value, field_name)
    try:
        text = json.dumps(value, cls=DjangoJSONEncoder, allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise Validation(f"{field_name} is not JSON: {exc}.", field=field_name) from None
    if max_bytes is not None and len(text.encode("utf-8", "surrogatepass")) > max_bytes:
        raise StorageLimit(f"{field_name} is larger than {max_bytes} bytes.", field=field_name, limit=max_bytes)
    cleaned = json.loads(text)
    # The encoder may have made text of other types (a str subclass's __str__, a lazy string, a key).
    json_policy.check(cleaned, field_name)
    return cleaned


def json_size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())


def clean_object(value: Any, field_name: str, *, max_bytes: int | None = None) -> dict[str, Any]:
    """A JSON object (``None`` reads as ``{}``)."""
    if value is None:
        return {}
    cleaned = clean_json(value, field_name, max_bytes=max_bytes)
    if not isinstance(cleaned, dict):
        raise Validation(f"{field_name} must be a JSON object.", field=field_name)
    return cleaned


def clean_text(value: Any, field_name: str, *, max_length: int, null: bool = False) -> str | None:
    if value is None:
        if null:
            return None
        raise Validation(f"{field_name} is required.", field=field_name)
    if not isinstance(value, str):
        raise Validation(f"{field_name} must be a string.", field=field_name)
    if len(value) > max_length:
        raise Validation(f"{field_name} is longer than {max_length} characters.", field=field_name)
    json_policy.check_text(value, field_name)
    return value


def clean_datetime(value: Any, field_name: str) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise Validation(f"{field_name} must be an ISO 8601 date and time.", field=field_name) from None
    if not isinstance(value, datetime):
        raise Validation(f"{field_name} must be a date and time.", field=field_name)
    if value.tzinfo is None:
        raise Validation(f"{field_name} must carry a time zone.", field=field_name)
    return value


def clean_paging(limit: Any, offset: Any) -> tuple[int, int]:
    if limit is None:
        limit = app_settings.DEFAULT_PAGE_SIZE
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= app_settings.MAX_PAGE_SIZE:
        raise Validation(f"limit must be a whole number from 1 to {app_settings.MAX_PAGE_SIZE}.", field="limit")
    if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset <= MAX_OFFSET:
        raise Validation(f"offset must be a whole number from 0 to {MAX_OFFSET}.", field="offset")
    return limit, offset


#: The largest offset a listing accepts (the largest a 64-bit LIMIT / OFFSET holds).
MAX_OFFSET = 2**63 - 1


def clean_with_total(with_total: Any, *cursors: Any) -> bool:
    """Whether a listing counts its total: as asked, else (None) unless it is read from a cursor.

    Counting costs what the listing holds, not what the page holds: on a long
    transcript it was most of a cursor page's time. A cursor reader moves by
    ``has_more`` and the cursor, so it gets no total unless it asks.
    """
    if with_total is None:
        return all(cursor is None for cursor in cursors)
    if not isinstance(with_total, bool):
        raise Validation("with_total must be true or false.", field="with_total")
    return with_total


def page_of_rows(rows: list[Any], limit: int, offset: int, *, with_total: bool = True) -> Page[Any]:
    """:func:`paginate` for rows already in a list (the in-memory stores)."""
    items = rows[offset : offset + limit]
    if with_total:
        return Page(items=items, total=len(rows), limit=limit, offset=offset)
    return Page(items=items, total=None, limit=limit, offset=offset, has_more=offset + limit < len(rows))


def clean_order(order: Any, default: str) -> str:
    order = order or default
    if order not in ("asc", "desc"):
        raise Validation("order must be 'asc' or 'desc'.", field="order")
    return order


#: The longest tenant or user id a scope may carry (the ``tenant`` and ``owner`` columns' length).
MAX_SCOPE_LENGTH = 255


def check_scope(scope: Any) -> Scope:
    """``scope`` if it is a Scope whose tenant and user every store's columns can hold.

    The one check of a scope, applied by every store call before any query:
    a tenant or user longer than :data:`MAX_SCOPE_LENGTH` characters, or with a
    NUL or a lone surrogate, is Validation code ``invalid_scope`` with
    ``details.field`` ``scope.tenant`` or ``scope.user`` (never stored, never a
    driver error). Not a Scope at all is TypeError: a programming error.
    """
    if not isinstance(scope, Scope):
        raise TypeError("Store calls take a Scope as their first argument.")
    for name, value in (("tenant", scope.tenant), ("user", scope.user)):
        if len(value) > MAX_SCOPE_LENGTH:
            raise Validation(f"The scope's {name} is longer than {MAX_SCOPE_LENGTH} characters.",
                             code="invalid_scope", field=f"scope.{name}")
        try:
            json_policy.check_text(value, f"scope.{name}")
        except Validation as error:
            raise Validation(f"The scope's {name} {error.message.split(' ', 1)[1]}",
                             code="invalid_scope", field=f"scope.{name}") from None
    return scope


#: The largest value a PositiveBigIntegerField holds on every backend.
MAX_EPOCH = 2**63 - 1


def clean_epoch(value: Any) -> int | None:
    """A producer's lease epoch (a whole number, 0 or more), or None for "not a producer write".

    Checked before it reaches a query, so a bad epoch is Validation rather than
    a ValueError from the field or an overflow from the driver.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_EPOCH:
        raise Validation("epoch must be a whole number, 0 or more.", field="epoch")
    return value


# -- conversation access ----------------------------------------------------------------------


def can_read(scope: Scope, conversation: Any) -> bool:
    """Whether ``scope`` may read this loaded conversation: its tenant's, and its owner's or shared.

    The ORM stores make the same check in SQL (``agent_persistence.stores.access.readable``).
    """
    return conversation.tenant == scope.tenant and (conversation.owner == scope.user or conversation.shared)


def check_writable(scope: Scope, conversation: Any) -> Any:
    """The loaded conversation if ``scope`` owns it; a reader gets 403, anyone else 404, whether or not it exists."""
    if conversation is None or not can_read(scope, conversation):
        raise NotFound("No such conversation.")
    if conversation.owner != scope.user:
        raise ConversationNotOwned()
    return conversation


def ids_of(values: Sequence[Any], what: str) -> list[uuid.UUID]:
    """Each of ``values`` as an id, by :func:`lookup_id` (NotFound: "No such <what>.")."""
    return [lookup_id(value, what) for value in values]
