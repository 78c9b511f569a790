"""The base view of every endpoint: scope resolution, error mapping, OpenAPI schema."""

from __future__ import annotations

from typing import Any, Callable

from drf_spectacular.openapi import AutoSchema
from rest_framework.settings import api_settings
from rest_framework.views import APIView

from ...scope import Scope
from ..errors import exception_handler
from ..permissions import HasScope, resolve_scope


class ScopedAPIView(APIView):
    """An APIView whose requests carry a Scope and whose errors use this app's handler.

    Authentication stays the host's (``REST_FRAMEWORK['DEFAULT_AUTHENTICATION_CLASSES']``).
    """

    permission_classes = [HasScope]
    schema = AutoSchema()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name in cls.http_method_names:
            rebase_method_schema(getattr(cls.__dict__.get(name), "kwargs", {}).get("schema"))

    def get_exception_handler(self) -> Callable[..., Any]:
        return exception_handler

    @property
    def scope(self) -> Scope:
        scope = resolve_scope(self.request)
        assert scope is not None, "HasScope let an unscoped request through"
        return scope


def rebase_method_schema(schema: Any) -> None:
    """Make a handler's ``@extend_schema`` class derive from drf-spectacular's AutoSchema.

    On a method, ``extend_schema`` cannot see the view's ``schema`` and derives
    from ``REST_FRAMEWORK["DEFAULT_SCHEMA_CLASS"]`` (DRF's own AutoSchema unless
    the host configured drf-spectacular), whose ``get_operation`` breaks the
    schema view. Rebasing the decorator's own class keeps the host's settings
    untouched.
    """
    default = api_settings.DEFAULT_SCHEMA_CLASS
    if not isinstance(schema, type) or issubclass(schema, AutoSchema):
        return
    for klass in schema.__mro__:
        if klass.__bases__ == (default,):
            klass.__bases__ = (AutoSchema,)
            return
