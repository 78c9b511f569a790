"""The base view of every endpoint: scope resolution, error mapping, OpenAPI schema."""

from __future__ import annotations

import unicodedata
from typing import Any, Callable

from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import extend_schema
from rest_framework.views import APIView

from ... import exceptions as domain
from ...conf import app_settings
from ...scope import Scope
from ..errors import exception_handler
from ..parsers import JSONBodyParser
from ..permissions import HasScope, resolve_scope
from ..serializers.base import representation


class ScopedAPIView(APIView):
    """An APIView whose requests carry a Scope and whose errors use this app's handler.

    The extension points (docs/howto/customize-the-api.md), for a view whose
    ``scoped`` is true (all but the OAuth callback):

    - permissions: ``HasScope`` first, always (the scope resolver is the
      tenancy hook), then the view's own ``permission_classes`` when a subclass
      sets them, else ``AGENT_PERSISTENCE['PERMISSION_CLASSES']`` (default none);
    - authentication: a subclass's ``authentication_classes``, else
      ``AGENT_PERSISTENCE['AUTHENTICATION_CLASSES']``, else the host's
      ``REST_FRAMEWORK['DEFAULT_AUTHENTICATION_CLASSES']`` (the default);
    - throttles: likewise with ``throttle_classes`` / ``THROTTLE_CLASSES`` /
      ``DEFAULT_THROTTLE_CLASSES``. A view's ``throttle_scope`` names it for
      ``ScopedRateThrottle`` (the turn start: ``agent_persistence.turn_start``).

    Bodies are JSON only, read through the app's JSON policy (``api/parsers.py``):
    any other content type is 415, whatever the host's ``DEFAULT_PARSER_CLASSES``.
    """

    #: False for a view anyone may call (the OAuth callback): its classes are its own, no setting applies.
    scoped = True
    permission_classes = [HasScope]
    parser_classes = [JSONBodyParser]
    # Decorate handlers with agent_persistence.api.schema.extend_schema, which builds on this class too.
    schema = AutoSchema()

    def get_exception_handler(self) -> Callable[..., Any]:
        return exception_handler

    def get_permissions(self) -> list[Any]:
        if not self.scoped:
            return super().get_permissions()
        own = self.permission_classes
        extra = app_settings.PERMISSION_CLASSES if own is ScopedAPIView.permission_classes else own
        return [HasScope(), *(permission() for permission in extra if permission is not HasScope)]

    def get_authenticators(self) -> list[Any]:
        configured = app_settings.AUTHENTICATION_CLASSES
        if self.scoped and configured is not None and self.authentication_classes is APIView.authentication_classes:
            return [authenticator() for authenticator in configured]
        return super().get_authenticators()

    def get_throttles(self) -> list[Any]:
        configured = app_settings.THROTTLE_CLASSES
        if self.scoped and configured is not None and self.throttle_classes is APIView.throttle_classes:
            return [throttle() for throttle in configured]
        return super().get_throttles()

    @property
    def scope(self) -> Scope:
        scope = resolve_scope(self.request)
        assert scope is not None, "HasScope let an unscoped request through"
        return scope


def resource_body(resource: str, serializer_class: Any) -> Callable[[Any], dict[str, Any]]:
    """``row -> dict``: one ``resource`` row as its serializer renders it.

    The built-in ``serializer_class`` (flat, read through the fast
    :func:`~agent_persistence.api.serializers.base.representation`) unless
    ``AGENT_PERSISTENCE['SERIALIZERS'][resource]`` names another, which renders
    the row as any DRF serializer does (``Serializer(row).data``), read on
    every call so a changed setting applies at once.
    """
    fast = representation(serializer_class)

    def body(instance: Any) -> dict[str, Any]:
        custom = app_settings.SERIALIZERS.get(resource)
        if custom is None or custom is serializer_class:
            return fast(instance)
        return dict(custom(instance).data)

    return body


def download_filename(name: str | None, fallback: str) -> str:
    """``name`` as a download's Content-Disposition filename: without format (Cf) or control (Cc) characters.

    Bidi controls (U+202E RIGHT-TO-LEFT OVERRIDE shows ``invoice\u202egpj.exe`` as
    ``invoiceexe.jpg``), zero-width characters and control characters never reach
    the header; the stored name is unchanged. ``fallback`` (the record's id) when
    nothing is left.
    """
    cleaned = "".join(char for char in name or "" if unicodedata.category(char) not in ("Cf", "Cc")).strip()
    return cleaned or fallback


@extend_schema(exclude=True)
class UnknownResourceView(ScopedAPIView):
    """The JSON 404 of a path under one of the API's resources that no route matches.

    Django decodes ``%2F`` before resolving, so an id holding one
    (``conversations/a%2Fb/``) reaches no route: this view answers it, for every
    method, as an unknown id is answered (401 first when anonymous). Not in the
    OpenAPI schema: it is no endpoint.
    """

    def refuse(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        raise domain.NotFound()

    get = post = put = patch = delete = refuse
