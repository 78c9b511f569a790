"""Who may call the API: a request the ``SCOPE_RESOLVER`` maps to a Scope.

What a scope may see is decided by the stores (owner, shared readers, tenant);
this permission only refuses requests that map to no scope (anonymous).
"""

from __future__ import annotations

from typing import Any

from rest_framework.permissions import BasePermission

from ..conf import app_settings
from ..scope import Scope


def resolve_scope(request: Any) -> Scope | None:
    if not hasattr(request, "_agent_persistence_scope"):
        request._agent_persistence_scope = app_settings.SCOPE_RESOLVER(request)
    return request._agent_persistence_scope


class HasScope(BasePermission):
    """Allows requests that resolve to a Scope(tenant, user)."""

    message = "Authentication credentials were not provided."

    def has_permission(self, request: Any, view: Any) -> bool:
        return resolve_scope(request) is not None
