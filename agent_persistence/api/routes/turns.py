"""URL patterns for turns (see api/urls.py)."""

from __future__ import annotations

urlpatterns: list = []
