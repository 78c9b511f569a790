"""Paging query parameters in, store pages out: ``{"items", "total", "limit", "offset", "has_more"}``.

``total`` is null when the page was read without counting: the default of a
read from a cursor (``before`` / ``after``), or ``?total=false``; ``?total=true``
asks for it.
"""

from __future__ import annotations

from typing import Any, Callable

from .. import json_policy
from ..conf import app_settings
from ..exceptions import Validation
from ..stores.base import Page


#: Query parameters are whole numbers of at most this many characters (sign included): past
#: it a value is out of every range below, and converting it would cost more than it is worth.
MAX_INT_PARAM_LENGTH = 20


def int_param(request: Any, name: str, default: int | None) -> int | None:
    """A whole-number query parameter within the signed 64-bit range, else 400 ``invalid_parameter``.

    The store checks the narrower range of each parameter (``offset`` 0 or
    more, ``limit`` up to ``MAX_PAGE_SIZE``); this keeps a number no column or
    ``OFFSET`` can hold from reaching it.
    """
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    value: int | None = None
    if len(raw) <= MAX_INT_PARAM_LENGTH and raw.strip() == raw:
        try:
            value = int(raw)
        except ValueError:
            value = None
    if value is None:
        raise Validation(f"{name} must be a whole number.", code="invalid_parameter", field=name)
    if not json_policy.MIN_INTEGER <= value <= json_policy.MAX_INTEGER:
        raise Validation(
            f"{name} must be a whole number from {json_policy.MIN_INTEGER} to {json_policy.MAX_INTEGER}.",
            code="invalid_parameter",
            field=name,
        )
    return value


def total_param(request: Any) -> bool | None:
    """``total``: true / 1 or false / 0, else 400 ``invalid_parameter``; None (the store's default) when absent."""
    raw = request.query_params.get("total")
    if raw is None or raw == "":
        return None
    if raw.lower() in ("true", "1"):
        return True
    if raw.lower() in ("false", "0"):
        return False
    raise Validation("total must be true or false.", code="invalid_parameter", field="total")


def paging(request: Any) -> dict[str, Any]:
    """``limit``, ``offset`` and ``total`` (as the store's ``with_total``) from the query string.

    The store validates the range of each and decides when ``total`` is absent.
    """
    return {
        "limit": int_param(request, "limit", app_settings.DEFAULT_PAGE_SIZE),
        "offset": int_param(request, "offset", 0),
        "with_total": total_param(request),
    }


def page_body(page: Page[Any], serialize: Callable[[Any], Any]) -> dict[str, Any]:
    return {
        "items": [serialize(item) for item in page.items],
        "total": page.total,
        "limit": page.limit,
        "offset": page.offset,
        "has_more": page.has_more,
    }
