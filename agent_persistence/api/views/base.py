"""The base view of every endpoint: scope resolution, error mapping, OpenAPI schema."""

from __future__ import annotations

import unicodedata
from typing import Any, Callable

from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import extend_schema
from rest_framework.views import APIView

from ... import exceptions as domain
from ...scope import Scope
from ..errors import exception_handler
from ..parsers import JSONBodyParser
from ..permissions import HasScope, resolve_scope


class ScopedAPIView(APIView):
    """An APIView whose requests carry a Scope and whose errors use this app's handler.

    Authentication stays the host's (``REST_FRAMEWORK['DEFAULT_AUTHENTICATION_CLASSES']``).
    Bodies are JSON only, read through the app's JSON policy (``api/parsers.py``):
    any other content type is 415, whatever the host's ``DEFAULT_PARSER_CLASSES``.
    """

    permission_classes = [HasScope]
    parser_classes = [JSONBodyParser]
    # Decorate handlers with agent_persistence.api.schema.extend_schema, which builds on this class too.
    schema = AutoSchema()

    def get_exception_handler(self) -> Callable[..., Any]:
        return exception_handler

    @property
    def scope(self) -> Scope:
        scope = resolve_scope(self.request)
        assert scope is not None, "HasScope let an unscoped request through"
        return scope



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
