"""URL patterns for conversations (see api/urls.py)."""

from __future__ import annotations

urlpatterns: list = []
