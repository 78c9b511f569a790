"""Serializers every resource shares: the error body and a strict input base.

Input serializers derive from :class:`StrictSerializer`, which refuses fields
it does not declare with a 400 whose code is ``unknown_field`` (DRF would
silently drop them). :func:`error_responses` documents error statuses in the
OpenAPI schema with :class:`ErrorSerializer`. :func:`representation` turns a
flat output serializer into a function of one instance, for pages.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import Any, Callable

from django.conf import settings
from django.core.exceptions import ValidationError as DjangoValidationError
from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse
from rest_framework import ISO_8601, serializers
from rest_framework.fields import SkipField, get_error_detail
from rest_framework.settings import api_settings

from ...exceptions import Validation

ERROR_DESCRIPTIONS: dict[int, str] = {
    400: "Bad request: malformed JSON (malformed_request), a wrong value (invalid), an unknown field (unknown_field).",
    401: "Not authenticated.",
    403: "Not allowed: a reader of a shared conversation writing (conversation_not_owned), or no permission.",
    404: "Not found, or not visible to the caller (not_found).",
    409: "Conflicts with the current state.",
    410: "No longer available (gone).",
    412: "The If-Match version is stale (version_mismatch, details.current_version).",
    413: "The body or file is larger than the configured limit (too_large).",
    415: "Unsupported media type.",
}


class ErrorSerializer(serializers.Serializer):
    """The body of every error response."""

    code = serializers.CharField(help_text="A stable, machine-readable error code.")
    message = serializers.CharField(help_text="A human-readable message.")
    details = serializers.JSONField(required=False, help_text="Structured details (field errors, current version...).")


def error_responses(*statuses: int) -> dict[int, OpenApiResponse]:
    """``{status: OpenApiResponse(ErrorSerializer)}`` for ``@extend_schema(responses=...)``."""
    return {
        status: OpenApiResponse(ErrorSerializer, description=ERROR_DESCRIPTIONS.get(status, "Error."))
        for status in statuses
    }


#: The codes of the domain errors input fields have raised (``future_time`` ...), as opposed to DRF's own
#: (``required``, ``invalid_choice`` ...): DRF rebuilds error details level by level, keeping only text and code,
#: so the API's exception handler tells a domain error of a nested field by its code.
DOMAIN_CODES: set[str] = set()


def domain_error_detail(error: Validation) -> serializers.ErrorDetail:
    """A domain :class:`~agent_persistence.exceptions.Validation` raised by a field, as that field's error."""
    DOMAIN_CODES.add(error.code)
    return serializers.ErrorDetail(error.message, code=error.code)


class StrictSerializer(serializers.Serializer):
    """A serializer that refuses undeclared fields with ``unknown_field`` (400).

    Read-only fields count as unknown in input: a client cannot set them.
    Nested strict serializers check their own level. Errors are collected per
    field, including the domain ``Validation`` a field raises (``future_time``
    of a message's ``created_at``), so that the answer names the path of the
    first one (``messages[0].created_at``, see ``api/errors.py``).
    """

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return super().to_internal_value(data)  # DRF's "Invalid data. Expected a dictionary" error
        writable = {name for name, field in self.fields.items() if not field.read_only}
        unknown = sorted(str(key) for key in data if key not in writable)
        if unknown:
            raise serializers.ValidationError(
                {key: [serializers.ErrorDetail("Unknown field.", code="unknown_field")] for key in unknown}
            )
        validated: dict[str, Any] = {}
        errors: dict[str, Any] = {}
        for field in self._writable_fields:
            validate_method = getattr(self, "validate_" + field.field_name, None)
            try:
                value = field.run_validation(field.get_value(data))
                if validate_method is not None:
                    value = validate_method(value)
            except serializers.ValidationError as exc:
                errors[field.field_name] = exc.detail
            except DjangoValidationError as exc:
                errors[field.field_name] = get_error_detail(exc)
            except Validation as exc:
                errors[field.field_name] = [domain_error_detail(exc)]
            except SkipField:
                pass
            else:
                self.set_value(validated, field.source_attrs, value)
        if errors:
            raise serializers.ValidationError(errors)
        return validated


class StrictCharField(serializers.CharField):
    """Text only: a number or a boolean is ``invalid`` rather than turned into text."""

    default_error_messages = {"invalid": "Not a valid string."}

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    """JSON ``true`` or ``false`` only."""

    def to_internal_value(self, data: Any) -> bool:
        if not isinstance(data, bool):
            self.fail("invalid", input=data)
        return data


class JSONObjectField(serializers.DictField):
    """A JSON object with values of any JSON type, null included."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("child", serializers.JSONField(allow_null=True))
        super().__init__(**kwargs)


class JSONArrayField(serializers.ListField):
    """A JSON array with items of any JSON type, null included."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("child", serializers.JSONField(allow_null=True))
        super().__init__(**kwargs)


def page_serializer(item: type[serializers.Serializer], name: str) -> type[serializers.Serializer]:
    """The serializer (for the schema) of a page of ``item``: items, total, limit, offset, has_more."""
    return type(
        name,
        (serializers.Serializer,),
        {
            "__doc__": f"A page of {item.__name__.removesuffix('Serializer')}.",
            "items": item(many=True),
            "total": serializers.IntegerField(
                allow_null=True,
                help_text="How many items the listing holds; null unless counted "
                "(the default without a cursor, or total=true).",
            ),
            "limit": serializers.IntegerField(),
            "offset": serializers.IntegerField(),
            "has_more": serializers.BooleanField(),
        },
    )


class AwareDateTimeField(serializers.DateTimeField):
    """An ISO 8601 date and time with a zone; a naive one is ``invalid``, as the stores have it."""

    default_error_messages = {"naive": "Datetime must carry a time zone (Z or +hh:mm)."}

    def enforce_timezone(self, value: Any) -> Any:
        if timezone.is_naive(value):
            self.fail("naive")
        return super().enforce_timezone(value)


Representation = Callable[[Any], dict[str, Any]]
Converter = Callable[[Any], Any]


def object_copy(value: Any) -> dict[str, Any]:
    return {str(key): item for key, item in value.items()}


class ZonedDateTime:
    """``DateTimeField.to_representation`` with the output format and zone looked up once per instance.

    DRF looks up the current time zone (a context-local) for every date-time
    it writes, which was most of a message's cost; :func:`representation`
    passes :func:`datetime_context` (the format and the zone) read once for all
    the date-times of one instance. A value the fast path does not cover (naive,
    ``USE_TZ`` off, a zone it cannot be moved to) goes to the field itself.
    """

    def __init__(self, field: serializers.DateTimeField) -> None:
        self.field = field

    def __call__(self, value: Any, context: tuple[str | None, Any]) -> Any:
        output_format, zone = context
        if output_format is None or isinstance(value, str):
            return value
        if zone is None or not timezone.is_aware(value):
            return self.field.to_representation(value)
        try:
            value = value.astimezone(zone)
        except OverflowError:
            return self.field.to_representation(value)
        if output_format.lower() != ISO_8601:
            return value.strftime(output_format)
        text = value.isoformat()
        return text[:-6] + "Z" if text.endswith("+00:00") else text


def datetime_context() -> tuple[str | None, Any]:
    """What DRF's DateTimeField reads for each value: the output format and the zone to write in."""
    return api_settings.DATETIME_FORMAT, timezone.get_current_timezone() if settings.USE_TZ else None


def converter(field: serializers.Field) -> Converter | ZonedDateTime | None:
    """What ``field.to_representation`` does to a value that is not None, or None when it returns the value itself.

    The declared field's own method, except for the exact field types below
    whose method reduces to a builtin: a JSON value is returned as it is, a
    JSON object or array of JSON values is copied (what DictField / ListField
    make of it with a JSONField child), a UUID, an integer or a text is
    ``str`` / ``int`` / ``str``; a date-time a :class:`ZonedDateTime`.
    Subclasses, and fields given their own ``format`` or ``timezone``, keep
    their own method.
    """
    kind = type(field)
    if kind is serializers.DateTimeField and not hasattr(field, "format") and not hasattr(field, "timezone"):
        return ZonedDateTime(field)
    if kind is serializers.JSONField and not field.binary:
        return None
    if kind in (JSONObjectField, JSONArrayField):
        child = field.child
        if type(child) is serializers.JSONField and not child.binary:
            return object_copy if kind is JSONObjectField else list
    if kind is serializers.UUIDField and field.uuid_format == "hex_verbose":
        return str
    if kind is serializers.IntegerField:
        return int
    if kind is serializers.CharField:
        return str
    return field.to_representation


def representation(serializer_class: type[serializers.Serializer]) -> Representation:
    """``lambda instance: serializer_class(instance).data``, without building a serializer per instance.

    Building a serializer deep-copies its declared fields, which cost more than
    everything else a page of 50 messages does (a page: 39 ms against 1.4 ms
    here and 3.7 ms for one ``many=True`` pass). Here the fields are built and
    bound once (on the first call, when the apps are loaded); each call reads
    every field's attribute and converts it as that field's
    ``to_representation`` does (:func:`converter`), skipping ``None`` as
    ``Serializer.to_representation`` does, so the dict is the one ``.data``
    holds. Flat serializers only: a field that reads the whole instance
    (``source="*"``, a method field, a nested serializer) is refused when the
    fields are bound.
    """
    readers: tuple[tuple[str, Callable[[Any], Any], Any], ...] = ()

    def bind() -> tuple[tuple[str, Callable[[Any], Any], Any], ...]:
        bound = []
        for name, field in serializer_class().fields.items():
            if field.write_only:
                continue
            if isinstance(field, (serializers.BaseSerializer, serializers.SerializerMethodField)) or field.source == "*":
                raise TypeError(f"{serializer_class.__name__}.{name} does not read one attribute.")
            simple = type(field).get_attribute is serializers.Field.get_attribute and len(field.source_attrs) == 1
            reader = operator.attrgetter(field.source_attrs[0]) if simple else field.get_attribute
            bound.append((name, reader, converter(field)))
        return tuple(bound)

    def represent(instance: Any) -> dict[str, Any]:
        nonlocal readers
        if not readers:
            readers = bind()  # two threads may both bind: each builds the same fields, either is kept
        body = {}
        context = None
        for name, read, convert in readers:
            value = read(instance)
            if value is None or convert is None:
                body[name] = value
            elif isinstance(convert, ZonedDateTime):
                context = context or datetime_context()
                body[name] = convert(value, context)
            else:
                body[name] = convert(value)
        return body

    represent.__name__ = f"{serializer_class.__name__.removesuffix('Serializer').lower()}_representation"
    return represent
