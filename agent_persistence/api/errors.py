"""Domain errors and DRF errors as HTTP responses with a stable ``code`` and a human ``message``.

Every error body has the shape ``{"code": ..., "message": ..., "details": {...}}``
(``details`` only when there are some). Views of this app use
:func:`exception_handler` whatever the host's ``REST_FRAMEWORK`` settings say.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django.http import Http404
from rest_framework import exceptions as drf
from rest_framework import status
from rest_framework.response import Response

from .. import exceptions as domain

logger = logging.getLogger(__name__)

STATUS_BY_ERROR: list[tuple[type[domain.AgentPersistenceError], int]] = [
    (domain.NotFound, status.HTTP_404_NOT_FOUND),
    (domain.ConversationNotOwned, status.HTTP_403_FORBIDDEN),
    (domain.Conflict, status.HTTP_409_CONFLICT),  # Busy, PendingInterrupts, Fenced too
    (domain.PreconditionFailed, status.HTTP_412_PRECONDITION_FAILED),
    (domain.Gone, status.HTTP_410_GONE),
    (domain.StorageLimit, status.HTTP_413_REQUEST_ENTITY_TOO_LARGE),
    (domain.Validation, status.HTTP_400_BAD_REQUEST),
    (domain.RangeNotSatisfiable, status.HTTP_416_REQUESTED_RANGE_NOT_SATISFIABLE),
    (domain.TooManyRequests, status.HTTP_429_TOO_MANY_REQUESTS),
]

DRF_CODES = {
    drf.ParseError: "malformed_request",
    drf.NotAuthenticated: "not_authenticated",
    drf.AuthenticationFailed: "authentication_failed",
    drf.PermissionDenied: "permission_denied",
    drf.NotFound: "not_found",
    drf.MethodNotAllowed: "method_not_allowed",
    drf.NotAcceptable: "not_acceptable",
    drf.UnsupportedMediaType: "unsupported_media_type",
    drf.Throttled: "throttled",
    drf.ValidationError: "invalid",
}


def status_for(error: domain.AgentPersistenceError) -> int:
    for error_class, http_status in STATUS_BY_ERROR:
        if isinstance(error, error_class):
            return http_status
    return status.HTTP_400_BAD_REQUEST


def error_body(code: str, message: str, details: Any = None) -> dict[str, Any]:
    body: dict[str, Any] = {"code": code, "message": message}
    if details:
        body["details"] = details
    return body


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's exception handler for this app's views."""
    if isinstance(exc, RequestDataTooBig):
        # A body over DATA_UPLOAD_MAX_MEMORY_SIZE: Django's own answer would be a bare 400.
        exc = domain.StorageLimit("The request body is larger than the server accepts.")
    if isinstance(exc, domain.AgentPersistenceError):
        retry_after = getattr(exc, "retry_after", None)
        headers = {"Retry-After": str(max(1, math.ceil(retry_after)))} if retry_after is not None else None
        return Response(exc.as_dict(), status=status_for(exc), headers=headers)
    if isinstance(exc, Http404):
        exc = drf.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = drf.PermissionDenied()
    if isinstance(exc, drf.APIException):
        headers = {}
        if getattr(exc, "auth_header", None):
            headers["WWW-Authenticate"] = exc.auth_header
        if getattr(exc, "wait", None):
            headers["Retry-After"] = str(int(exc.wait))
        code = next((code for cls, code in DRF_CODES.items() if isinstance(exc, cls)), "error")
        if isinstance(exc, drf.ValidationError):
            return Response(error_body(code, "The request is not valid.", exc.detail), status=exc.status_code)
        message = str(exc.detail) if not isinstance(exc.detail, (list, dict)) else "The request failed."
        return Response(error_body(code, message), status=exc.status_code, headers=headers)
    return None  # a bug: Django answers 500 without a traceback in production, and logs it
