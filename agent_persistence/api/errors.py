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
from rest_framework.settings import api_settings as drf_settings

from .. import exceptions as domain
from .serializers.base import DOMAIN_CODES

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
    (domain.Unavailable, status.HTTP_503_SERVICE_UNAVAILABLE),  # ShuttingDown too
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
        body = exc.as_dict()
        if status_for(exc) == status.HTTP_400_BAD_REQUEST and "field" not in body.get("details", {}):
            body["details"] = {**body.get("details", {}), "field": "body"}  # the body (or request) as a whole
        return Response(body, status=status_for(exc), headers=headers)
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
            return Response(validation_body(exc.detail), status=exc.status_code)
        message = str(exc.detail) if not isinstance(exc.detail, (list, dict)) else "The request failed."
        details = {"field": "body"} if exc.status_code == status.HTTP_400_BAD_REQUEST else None
        return Response(error_body(code, message, details), status=exc.status_code, headers=headers)
    return None  # a bug: Django answers 500 without a traceback in production, and logs it


def error_paths(detail: Any, path: str = "") -> list[tuple[str, Any]]:
    """Every error of a DRF ``ValidationError.detail`` with its path in the body, in body order.

    Keys join with dots, list positions (and ``ListField`` / ``ListSerializer``
    indexes) in brackets: ``activities[0].content``. A serializer's own errors
    (``non_field_errors``) are at the serializer's path; the top level is ``body``.
    """
    found: list[tuple[str, Any]] = []
    if isinstance(detail, dict):
        for key, value in detail.items():
            if key == drf_settings.NON_FIELD_ERRORS_KEY:
                found += error_paths(value, path)
            elif isinstance(key, int):
                found += error_paths(value, f"{path}[{key}]")
            else:
                found += error_paths(value, f"{path}.{key}" if path else str(key))
    elif isinstance(detail, list):
        if all(not isinstance(item, (dict, list)) for item in detail):
            found += [(path or "body", item) for item in detail]
        else:
            for index, item in enumerate(detail):
                if item:
                    found += error_paths(item, f"{path}[{index}]")
    else:
        found.append((path or "body", detail))
    return found


def validation_body(detail: Any) -> dict[str, Any]:
    """The error body of a refused request body: the first error's code, message and ``details.field``.

    ``unknown_field`` when the body has fields the endpoint does not take
    (``details.fields`` lists their paths); a domain error a field raised keeps
    its code (``future_time``); anything else is
    ``invalid`` with ``details.errors`` mapping each path to its messages.
    """
    errors = error_paths(detail)
    if not errors:
        return error_body("invalid", "The request is not valid.", {"field": "body"})
    unknown = [path for path, error in errors if getattr(error, "code", None) == "unknown_field"]
    if unknown:
        return error_body("unknown_field", f"Unknown field(s): {', '.join(unknown)}.",
                          {"field": unknown[0], "fields": unknown})
    path, first = errors[0]
    grouped: dict[str, list[str]] = {}
    for where, error in errors:
        grouped.setdefault(where, []).append(str(error))
    code = getattr(first, "code", None)
    if code in DOMAIN_CODES and code != "invalid":
        return error_body(code, str(first), {"field": path, "errors": grouped})
    return error_body("invalid", "The request is not valid.", {"field": path, "errors": grouped})
