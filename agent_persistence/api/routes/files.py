"""URL patterns for files (see api/urls.py)."""

from __future__ import annotations

urlpatterns: list = []
