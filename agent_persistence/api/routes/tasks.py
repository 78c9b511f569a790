"""URL patterns for tasks (see api/urls.py)."""

from __future__ import annotations

urlpatterns: list = []
