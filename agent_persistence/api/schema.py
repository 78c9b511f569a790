"""OpenAPI schema helpers: drf-spectacular's ``extend_schema``, bound to its own AutoSchema.

drf-spectacular builds a method-level ``@extend_schema`` on the host's
``REST_FRAMEWORK["DEFAULT_SCHEMA_CLASS"]``; the host should not have to set it
for this app, so the views use this ``extend_schema``, which builds on
``drf_spectacular.openapi.AutoSchema`` whatever the host's settings say.
"""

from __future__ import annotations

from typing import Any, Callable

from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import extend_schema as spectacular_extend_schema
from drf_spectacular.views import SpectacularAPIView

#: Component names for enums whose field names collide (run and interrupt ``status``, ...).
ENUM_NAME_OVERRIDES = {
    "RunStatusEnum": "agent_persistence.models.RunStatus",
    "InterruptStatusEnum": "agent_persistence.models.InterruptStatus",
    "InterruptKindEnum": "agent_persistence.models.InterruptKind",
    "TaskStatusEnum": "agent_persistence.models.TaskStatus",
    "RoleEnum": "agent_persistence.models.Role",
    "LastTurnStatusEnum": "agent_persistence.models.LastTurnStatus",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "agent_persistence API",
    "DESCRIPTION": "Durable AI-agent conversations and resumable turns.",
    "VERSION": "1",
    "ENUM_NAME_OVERRIDES": ENUM_NAME_OVERRIDES,
    "COMPONENT_SPLIT_REQUEST": True,
}


def extend_schema(*args: Any, **kwargs: Any) -> Callable[[Any], Any]:
    """``drf_spectacular.utils.extend_schema`` built on drf-spectacular's AutoSchema."""
    decorate = spectacular_extend_schema(*args, **kwargs)

    def decorator(view_or_method: Any) -> Any:
        if getattr(view_or_method, "schema", None) is None and not getattr(view_or_method, "kwargs", {}).get("schema"):
            view_or_method.schema = AutoSchema
        return decorate(view_or_method)

    return decorator


class SchemaView(SpectacularAPIView):
    """The OpenAPI 3 document of this app's API (``?format=json`` for JSON)."""

    schema = None  # the schema endpoint is left out of the schema itself
    urlconf = "agent_persistence.api.urls"
    custom_settings = SPECTACULAR_SETTINGS
