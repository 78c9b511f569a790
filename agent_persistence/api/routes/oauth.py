"""URL patterns for MCP OAuth (see api/urls.py)."""

from __future__ import annotations

urlpatterns: list = []
