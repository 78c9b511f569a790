"""Paging query parameters in, store pages out: ``{"items", "total", "limit", "offset", "has_more"}``."""

from __future__ import annotations

from typing import Any, Callable

from ..conf import app_settings
from ..exceptions import Validation
from ..stores.base import Page


def int_param(request: Any, name: str, default: int | None) -> int | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise Validation(f"{name} must be a whole number.", code="invalid_parameter", field=name) from None


def paging(request: Any) -> dict[str, Any]:
    """``limit`` and ``offset`` from the query string (the store validates their range)."""
    return {"limit": int_param(request, "limit", app_settings.DEFAULT_PAGE_SIZE), "offset": int_param(request, "offset", 0)}


def page_body(page: Page[Any], serialize: Callable[[Any], Any]) -> dict[str, Any]:
    return {
        "items": [serialize(item) for item in page.items],
        "total": page.total,
        "limit": page.limit,
        "offset": page.offset,
        "has_more": page.has_more,
    }
