"""What every store shares: pages, compiled statements and the rows they read, async twins, input cleaning and conversation access.

Stores are sync and open their own ``transaction.atomic()`` blocks; each async
twin (``aget`` for ``get``) is a thin ``sync_to_async`` wrapper, as Django's
own session backends do. Input is cleaned here before it reaches a column, so
a bad value is a domain error (:class:`~agent_persistence.exceptions.Validation`,
:class:`~agent_persistence.exceptions.StorageLimit`) and never a driver error.
"""

from __future__ import annotations

import functools
import json
import uuid
import weakref
from dataclasses import dataclass
from datetime import datetime
from datetime import timezone as dt_timezone
from typing import Any, Callable, Generic, Sequence, TypeVar

from asgiref.sync import sync_to_async
from django.core.serializers.json import DjangoJSONEncoder
from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.models import Count, Exists, JSONField, Model, Q, Subquery, Window
from django.db.models.base import ModelState
from django.db.models.fields.related_descriptors import ForeignKeyDeferredAttribute
from django.db.models.query_utils import DeferredAttribute
from django.db.models.signals import post_init, pre_init

from .. import json_policy
from ..conf import app_settings
from ..exceptions import ConversationNotOwned, NotFound, StorageLimit, Validation
from ..models import Conversation
from ..scope import Scope

T = TypeVar("T")

#: Marks an argument the caller did not pass (``None`` is a value: "clear it").
UNSET: Any = type("Unset", (), {"__repr__": lambda self: "UNSET", "__bool__": lambda self: False})()


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a listing.

    ``total`` counts the whole listing, or is None when the page was read
    without counting it (``with_total=False``, the default of cursor reads);
    ``has_more`` is then given by the reader (one row read past the page),
    otherwise it is ``offset + len(items) < total``.
    """

    items: list[T]
    total: int | None
    limit: int
    offset: int
    has_more: bool = None  # type: ignore[assignment]  # None: from total

    def __post_init__(self) -> None:
        if self.has_more is None:
            if self.total is None:
                raise TypeError("A page without a total needs has_more.")
            object.__setattr__(self, "has_more", self.offset + len(self.items) < self.total)


def heal_connections() -> None:
    """Drop this thread's database connections that an error left unusable.

    Async twins run on long-lived threads (the producer loop's sync thread)
    that no request cycle ever cleans up: after a database restart their
    connection would stay broken forever. A connection that saw an error and
    no longer answers is closed, so the next query opens a fresh one; a
    healthy connection is kept (no reconnect per call, whatever CONN_MAX_AGE).
    """
    for alias_connection in connections.all(initialized_only=True):
        if alias_connection.connection is None or alias_connection.in_atomic_block or not alias_connection.errors_occurred:
            continue
        if alias_connection.is_usable():
            alias_connection.errors_occurred = False
        else:
            alias_connection.close()


def healed(method: Callable[..., T]) -> Callable[..., T]:
    """``method``, run after :func:`heal_connections` on the thread that runs it."""

    def call(*args: Any, **kwargs: Any) -> T:
        heal_connections()
        return method(*args, **kwargs)

    return call


def async_twin(name: str) -> Callable[..., Any]:
    """An ``async`` method that runs the sync method ``name`` in Django's sync thread (healing its connections)."""

    async def twin(self: Any, *args: Any, **kwargs: Any) -> Any:
        return await sync_to_async(healed(getattr(self, name)))(*args, **kwargs)

    twin.__name__ = f"a{name}"
    twin.__doc__ = f"Async twin of :meth:`{name}`."
    return twin


# -- cleaning input ---------------------------------------------------------------------------


def parse_id(value: Any, what: str = "id") -> uuid.UUID:
    """A UUID from a UUID or its text; anything else is Validation(code="invalid_id")."""
    if isinstance(value, uuid.UUID):
        return value
    if isinstance(value, str):
        try:
            return uuid.UUID(value)
        except ValueError:
            pass
    raise Validation(f"{what} must be a UUID.", code="invalid_id", field=what)


def lookup_id(value: Any, what: str = "conversation") -> uuid.UUID:
    """A UUID to look up; a value that cannot be one names nothing, so it is NotFound."""
    try:
        return parse_id(value, what)
    except Validation:
        raise NotFound(f"No such {what}.") from None


def clean_json(value: Any, field_name: str, *, max_bytes: int | None = None) -> Any:
    """What ``json.loads(json.dumps(value))`` gives: dates become ISO text, tuples lists.

    The value is checked by the JSON policy first (:func:`agent_persistence.json_policy.check`:
    no NUL or lone surrogate, integers within 64 bits, finite numbers, nesting
    within ``JSON_MAX_DEPTH``), and so is what the encoder made of it. Values
    JSON cannot hold (NaN, sets, objects) are Validation; a value whose JSON is
    larger than ``max_bytes`` is StorageLimit.
    """
    json_policy.check(value, field_name)
    try:
        text = json.dumps(value, cls=DjangoJSONEncoder, allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise Validation(f"{field_name} is not JSON: {exc}.", field=field_name) from None
    if max_bytes is not None and len(text.encode("utf-8", "surrogatepass")) > max_bytes:
        raise StorageLimit(f"{field_name} is larger than {max_bytes} bytes.", field=field_name, limit=max_bytes)
    cleaned = json.loads(text)
    # The encoder may have made text of other types (a str subclass's __str__, a lazy string, a key).
    json_policy.check(cleaned, field_name)
    return cleaned


def json_size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())


def clean_object(value: Any, field_name: str, *, max_bytes: int | None = None) -> dict[str, Any]:
    """A JSON object (``None`` reads as ``{}``)."""
    if value is None:
        return {}
    cleaned = clean_json(value, field_name, max_bytes=max_bytes)
    if not isinstance(cleaned, dict):
        raise Validation(f"{field_name} must be a JSON object.", field=field_name)
    return cleaned


def clean_text(value: Any, field_name: str, *, max_length: int, null: bool = False) -> str | None:
    if value is None:
        if null:
            return None
        raise Validation(f"{field_name} is required.", field=field_name)
    if not isinstance(value, str):
        raise Validation(f"{field_name} must be a string.", field=field_name)
    if len(value) > max_length:
        raise Validation(f"{field_name} is longer than {max_length} characters.", field=field_name)
    json_policy.check_text(value, field_name)
    return value


def clean_datetime(value: Any, field_name: str) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise Validation(f"{field_name} must be an ISO 8601 date and time.", field=field_name) from None
    if not isinstance(value, datetime):
        raise Validation(f"{field_name} must be a date and time.", field=field_name)
    if value.tzinfo is None:
        raise Validation(f"{field_name} must carry a time zone.", field=field_name)
    return value


def clean_paging(limit: Any, offset: Any) -> tuple[int, int]:
    if limit is None:
        limit = app_settings.DEFAULT_PAGE_SIZE
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= app_settings.MAX_PAGE_SIZE:
        raise Validation(f"limit must be a whole number from 1 to {app_settings.MAX_PAGE_SIZE}.", field="limit")
    if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset <= MAX_OFFSET:
        raise Validation(f"offset must be a whole number from 0 to {MAX_OFFSET}.", field="offset")
    return limit, offset


#: The largest offset a listing accepts (the largest a 64-bit LIMIT / OFFSET holds).
MAX_OFFSET = 2**63 - 1


def clean_with_total(with_total: Any, *cursors: Any) -> bool:
    """Whether a listing counts its total: as asked, else (None) unless it is read from a cursor.

    Counting costs what the listing holds, not what the page holds: on a long
    transcript it was most of a cursor page's time. A cursor reader moves by
    ``has_more`` and the cursor, so it gets no total unless it asks.
    """
    if with_total is None:
        return all(cursor is None for cursor in cursors)
    if not isinstance(with_total, bool):
        raise Validation("with_total must be true or false.", field="with_total")
    return with_total


def paginate(queryset: Any, limit: int, offset: int, *, with_total: bool = True) -> Page[Any]:
    """One page of ``queryset`` (already ordered), from paging cleaned by :func:`clean_paging`.

    The one paging helper of every store listing. With ``with_total`` it counts
    first and skips the page query once ``offset`` is past the end, so an offset
    however large never reaches the driver's ``OFFSET``; without, it reads one
    row past the page for ``has_more`` (an ``OFFSET`` up to ``MAX_OFFSET``
    fits the 64-bit column both databases use for it).
    """
    if not with_total:
        rows = list(queryset[offset : offset + limit + 1])
        return Page(items=rows[:limit], total=None, limit=limit, offset=offset, has_more=len(rows) > limit)
    # The total and the items of one page come from one snapshot: the page's statement counts the
    # listing too (COUNT(*) OVER ()), since a count and a page read apart see different commits when
    # a writer runs between them. An empty page counts alone; a count that says the page should have
    # had rows means a write came in between, and the page is read again.
    for _ in range(PAGE_SNAPSHOT_ATTEMPTS):
        total = queryset.count()
        if offset >= total:
            return Page(items=[], total=total, limit=limit, offset=offset)
        items = list(queryset.annotate(page_total_=Window(Count("*")))[offset : offset + limit])
        if items:
            total = items[0].page_total_
            return Page(items=items, total=total, limit=limit, offset=offset)
    return Page(items=[], total=offset, limit=limit, offset=offset)


#: How many times :func:`paginate` reads a counted page whose rows all went between its count and its read.
PAGE_SNAPSHOT_ATTEMPTS = 5


@dataclass(frozen=True, slots=True)
class Utf8Text:
    """A parameter of :func:`execute_bound`: text already encoded as UTF-8 (``data``), bound as ``text``.

    On PostgreSQL the bytes are sent as they are (the server checks they are
    UTF-8), sparing a decode to ``str`` and psycopg's encode back, which cost
    milliseconds per megabyte of non-ASCII text. Elsewhere the text is decoded.
    """

    data: bytes


@functools.cache
def _utf8_text_dumper() -> type:
    """psycopg's dumper of :class:`Utf8Text` (made on first use: psycopg is imported only on PostgreSQL)."""
    from psycopg.adapt import Dumper
    from psycopg.postgres import types
    from psycopg.pq import Format

    class Utf8TextDumper(Dumper):
        format = Format.TEXT
        oid = types["text"].oid

        def dump(self, obj: Utf8Text) -> bytes:
            return obj.data

    return Utf8TextDumper


def execute_bound(sql: str, params: Sequence[Any], *, db: Any = None) -> list[tuple[Any, ...]]:
    """Run ``sql`` on the default connection (``db``, its wrapper, when the caller has it) with its
    parameters sent apart from it; the rows it returns.

    PostgreSQL: a psycopg cursor binding server-side, on Django's connection (so
    in its transaction and under its ``prepare_threshold``: Django's default
    prepares nothing by name, which transaction-mode poolers need), its errors
    raised as Django's. Django's own cursor binds client-side: it would inline
    a state or a recording of up to ``MAX_STATE_BYTES`` as a quoted literal for
    the server to parse. Elsewhere, Django's cursor (a :class:`Utf8Text`
    decoded). A statement that returns no rows (no ``RETURNING``) gives ``[]``.
    """
    if db is None:
        db = connections[DEFAULT_DB_ALIAS]  # the proxy ``connection`` looks the wrapper up again on every attribute
    if db.vendor != "postgresql":
        params = [param.data.decode() if isinstance(param, Utf8Text) else param for param in params]
        with db.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchall() if cursor.description else []
    import psycopg

    db.ensure_connection()
    raw = db.connection
    if raw not in _BINDING_UTF8_TEXT:
        # Once per connection: a dumper registered on each cursor would copy the adapters and lose their caches.
        raw.adapters.register_dumper(Utf8Text, _utf8_text_dumper())
        _BINDING_UTF8_TEXT.add(raw)
    with db.wrap_database_errors, psycopg.Cursor(raw) as cursor:
        cursor.execute(sql, params)
        result = cursor.pgresult
        return cursor.fetchall() if result is not None and result.nfields else []  # cheaper than ``description``


#: psycopg connections whose adapters dump :class:`Utf8Text` (Django's, each a private copy of psycopg's defaults).
_BINDING_UTF8_TEXT: weakref.WeakSet[Any] = weakref.WeakSet()


@dataclass(frozen=True)
class Statement:
    """The SQL a queryset compiles to, kept with where each call's own values go.

    Built by :func:`compile_statement` from a queryset whose variable values
    are slots (unique stand-ins); :meth:`params` puts a call's values where the
    slots were, in the form the backend was given them. Only SQL text is kept,
    never a row, so nothing read through it can be stale.
    """

    sql: str
    #: Per parameter: ``(slot name, form)`` for a slot, ``(None, constant)`` otherwise.
    slots: tuple[tuple[str | None, Any], ...]
    #: The selected columns, in order (Django's ``Col`` expressions): how :func:`read_models` reads a row.
    columns: tuple[Any, ...] = ()

    def params(self, values: dict[str, Any]) -> list[Any]:
        bound = []
        for name, form in self.slots:
            if name is None:
                bound.append(form)
            elif form == "hex":
                bound.append(values[name].hex)
            elif form == "str":
                bound.append(str(values[name]))
            else:
                bound.append(values[name])
        return bound


def statement_slots(*names: str, ids: Sequence[str] = ()) -> dict[str, Any]:
    """Unique stand-ins for :func:`compile_statement`: text for ``names``, UUIDs for ``ids``."""
    slots: dict[str, Any] = {name: f"ap-slot-{name}-{uuid.uuid4().hex}" for name in names}
    slots.update((name, uuid.uuid4()) for name in ids)
    return slots


def compile_statement(queryset: Any, slots: dict[str, Any]) -> Statement:
    """Compile ``queryset`` (built with the values of ``slots``) once, for :class:`Statement`.

    A UUID slot is recognised in each form a backend is given one (the UUID
    itself on PostgreSQL, its hex on SQLite). A slot compiled into the SQL text
    rather than passed as a parameter could not be rebound, so it is refused.
    """
    forms: dict[Any, tuple[str, str]] = {}
    for name, value in slots.items():
        forms[value] = (name, "as-is")
        if isinstance(value, uuid.UUID):
            forms[value.hex] = (name, "hex")
            forms[str(value)] = (name, "str")
    compiler = queryset.query.get_compiler(queryset.db)
    sql, params = compiler.as_sql()
    for value in forms:
        if str(value) in sql or (isinstance(value, uuid.UUID) and value.hex in sql):
            raise AssertionError(f"A slot was compiled into the SQL text: {sql}")
    bound: list[tuple[str | None, Any]] = []
    for param in params:
        try:
            bound.append(forms[param])
        except (KeyError, TypeError):  # a constant (TypeError: unhashable)
            bound.append((None, param))
    return Statement(sql=sql, slots=tuple(bound), columns=tuple(column for column, _, _ in compiler.select))


def read_models(model: type[Model], statement: Statement, values: dict[str, Any], using: str) -> list[Model]:
    """The rows of ``statement`` with ``values`` bound, as instances of ``model``.

    What ``list(model.objects.raw(statement.sql, ...))`` gives, through Django's
    cursor (its execute wrappers, query log and errors) and the converters
    Django gives for each column, with less work per row. The statement is a
    queryset of ``model`` compiled by :func:`compile_statement` (its own
    columns: no annotations, no joined models), so a row is read by position,
    not matched by column name. The JSON columns are decoded by
    :func:`json_policy.loads` (what ``JSONField`` gives, faster); PostgreSQL's
    times by psycopg's own loader where that gives Django's datetimes
    (:func:`load_times_natively`); instances are built by :func:`instance_builder`.
    """
    database = connections[using]
    with database.cursor() as cursor:
        load_times_natively(database, cursor)
        cursor.execute(statement.sql, statement.params(values))
        rows = cursor.fetchall()
    attnames = tuple(column.target.attname for column in statement.columns)
    converters = []
    for position, column in enumerate(statement.columns):
        functions = [
            decode_json_column if is_plain_json_decoder(function) else function
            for function in database.ops.get_db_converters(column) + column.get_db_converters(database)
        ]
        if functions:
            converters.append((position, functions, column))
    build = instance_builder(model, attnames)
    instances = []
    for row in rows:
        row_values = list(row)
        for position, functions, column in converters:
            value = row_values[position]
            for function in functions:
                value = function(value, column, database)
            row_values[position] = value
        instances.append(build(using, attnames, row_values))
    return instances


def is_plain_json_decoder(converter: Any) -> bool:
    """Whether ``converter`` is ``JSONField.from_db_value`` of a field without a custom decoder."""
    return getattr(converter, "__func__", None) is JSONField.from_db_value and converter.__self__.decoder is None


def decode_json_column(value: Any, expression: Any, connection: Any) -> Any:
    """``JSONField.from_db_value`` for a column (not a key transform) of a field without a decoder, by :func:`json_policy.loads`."""
    if value is None:
        return None
    try:
        return json_policy.loads(value)
    except json.JSONDecodeError:
        return value  # as the field does: text that is not JSON is given as it is


def load_times_natively(database: Any, cursor: Any) -> None:
    """Let ``cursor`` read ``timestamptz`` with psycopg's own loader where it gives what Django's gives.

    Django's loader (PostgreSQL, psycopg 3) is psycopg's pure-Python one
    followed by ``replace(tzinfo=database.timezone)``. When that time zone
    and the session's are both UTC (``USE_TZ`` without a database
    ``TIME_ZONE``, Django's default), psycopg's loader alone gives the same
    datetime with the same ``datetime.timezone.utc``, and its compiled one
    (psycopg's C extension, when installed) does it several times faster. Any
    other case keeps Django's loader; the change is this cursor's only.
    """
    if database.vendor != "postgresql" or database.timezone is not dt_timezone.utc:
        return
    from django.db.backends.postgresql.psycopg_any import is_psycopg3

    if not is_psycopg3 or cursor.cursor.connection.info.timezone is not dt_timezone.utc:
        return
    oid, loader = native_timestamptz_loader()
    cursor.cursor.adapters.register_loader(oid, loader)


@functools.cache
def native_timestamptz_loader() -> tuple[int, type[Any]]:
    """psycopg's own text loader of ``timestamptz`` (its C one when compiled), and the type's oid."""
    import psycopg
    from psycopg import pq

    oid = psycopg.postgres.types["timestamptz"].oid
    return oid, psycopg.adapters.get_loader(oid, pq.Format.TEXT)


def instance_builder(model: type[Model], attnames: tuple[str, ...]) -> Callable[[str, tuple[str, ...], list[Any]], Model]:
    """``model.from_db``, or a builder that makes the same instance without running ``Model.__init__`` per row.

    ``Model.from_db`` with every concrete field's value runs ``Model.__init__``,
    which for such a row only sends ``pre_init`` / ``post_init`` and sets each
    attribute through its descriptor, then marks the state as loaded from
    ``using``. When nothing can observe the difference (the model keeps
    Django's ``__init__`` and ``from_db``, no receiver listens to either signal
    for it, and each field's descriptor is Django's plain one, which for a
    fresh instance only stores the value), the values go straight into the
    instance's ``__dict__``, in a fifth of the time. Otherwise ``model.from_db``.
    """
    if not plain_model_fields(model, attnames) or pre_init.has_listeners(model) or post_init.has_listeners(model):
        return model.from_db

    def build(using: str, attnames: tuple[str, ...], values: list[Any]) -> Model:
        instance = model.__new__(model)
        state = instance._state = ModelState()
        state.adding = False
        state.db = using
        instance.__dict__.update(zip(attnames, values))
        return instance

    return build


def plain_model_fields(model: type[Model], attnames: tuple[str, ...]) -> bool:
    """Whether ``attnames`` are ``model``'s concrete fields in order, behind Django's own ``__init__``, ``from_db`` and descriptors."""
    return (
        model.__init__ is Model.__init__
        and model.from_db.__func__ is Model.from_db.__func__  # type: ignore[attr-defined]
        and attnames == tuple(field.attname for field in model._meta.concrete_fields)
        and all(type(getattr(model, attname)) in (DeferredAttribute, ForeignKeyDeferredAttribute) for attname in attnames)
    )


def past_cursor(key: str, lookup: str, cursor_key: Any, cursor_pk: uuid.UUID) -> Q:
    """``(key, id) < (cursor_key, cursor_pk)`` (``lookup="lt"``; ``"gt"``: ``>``), for an index on ``(..., key, id)``.

    Written ``key <= k AND (key < k OR id < c)``: the first half bounds the
    index scan, the second only sorts out the rows that tie with the cursor on ``k``.
    """
    return Q(**{f"{key}__{lookup}e": cursor_key}) & (Q(**{f"{key}__{lookup}": cursor_key}) | Q(**{f"pk__{lookup}": cursor_pk}))


def keyset(cursor_rows: Any, key: str, *, before: uuid.UUID | None, after: uuid.UUID | None) -> Q:
    """The rows strictly before / after the cursors on ``(key, id)``, in the key's ascending sense.

    Each cursor's key is read by a subquery of ``cursor_rows`` (the rows a
    cursor may name), so the page stays one statement; a cursor that names
    none of them makes the condition false (an empty page, which the caller
    then explains).
    """
    condition = Q()
    for cursor, lookup in ((before, "lt"), (after, "gt")):
        if cursor is not None:
            cursor_key = Subquery(cursor_rows.filter(pk=cursor).order_by().values(key))
            condition &= past_cursor(key, lookup, cursor_key, cursor)
    return condition


def keyset_page(
    rows: Any,
    *,
    key: str,
    cursor_rows: Any,
    before: Any,
    after: Any,
    what: str,
    limit: int,
    offset: int,
    with_total: Any,
    access: Any = None,
    check_access: Callable[[], Any] = lambda: None,
) -> Page[Any]:
    """A page of a listing by offset and strict ``before`` / ``after`` id cursors on ``(key, id)``.

    ``rows`` is the listing, filtered and ordered for display; ``cursor_rows``
    the rows a cursor may name (a cursor naming any other row, or no UUID, is
    NotFound: "No such <what>."). ``check_access()`` raises NotFound when the
    scope may not see the listing at all; ``access`` is the same check as a
    condition of the page's own statement (:func:`may_read`), or None when
    ``rows`` is already the scope's own. ``with_total`` is cleaned here, by
    :func:`clean_with_total` (a bad value is Validation, after NotFound for a
    listing out of reach, as a listing that checked access first answered).

    Counted (``with_total``): the access check, each cursor's key and the page
    are separate statements, as :func:`paginate` counts. Uncounted: one
    statement (access check and cursors as its subqueries); only an empty
    page looks again, to tell "nothing more" from a listing or cursor the
    scope may not see, so a stranger gets NotFound, never an empty page.
    """
    try:
        with_total = clean_with_total(with_total, before, after)
    except Validation:
        check_access()
        raise
    if with_total:
        check_access()
        for cursor, lookup in ((before, "lt"), (after, "gt")):
            if cursor is None:
                continue
            cursor_pk = lookup_id(cursor, what)
            cursor_key = cursor_rows.filter(pk=cursor_pk).values_list(key, flat=True).first()
            if cursor_key is None:
                raise NotFound(f"No such {what}.")
            rows = rows.filter(past_cursor(key, lookup, cursor_key, cursor_pk))
        return paginate(rows, limit, offset)
    try:
        cursors = {
            direction: None if cursor is None else lookup_id(cursor, what)
            for direction, cursor in (("before", before), ("after", after))
        }
    except NotFound:
        page = None  # a malformed cursor: raised below, after the access check, as a counted read would
    else:
        if access is not None:
            rows = rows.filter(access)
        page = paginate(rows.filter(keyset(cursor_rows, key, **cursors)), limit, offset, with_total=False)
        if page.items:
            return page
    check_access()
    for cursor in (before, after):
        if cursor is not None and not cursor_rows.filter(pk=lookup_id(cursor, what)).exists():
            raise NotFound(f"No such {what}.")
    assert page is not None, "a malformed cursor passed lookup_id"
    return page


def page_of_rows(rows: list[Any], limit: int, offset: int, *, with_total: bool = True) -> Page[Any]:
    """:func:`paginate` for rows already in a list (the in-memory stores)."""
    items = rows[offset : offset + limit]
    if with_total:
        return Page(items=items, total=len(rows), limit=limit, offset=offset)
    return Page(items=items, total=None, limit=limit, offset=offset, has_more=offset + limit < len(rows))


def clean_order(order: Any, default: str) -> str:
    order = order or default
    if order not in ("asc", "desc"):
        raise Validation("order must be 'asc' or 'desc'.", field="order")
    return order


#: The longest tenant or user id a scope may carry (the ``tenant`` and ``owner`` columns' length).
MAX_SCOPE_LENGTH = 255


def check_scope(scope: Any) -> Scope:
    """``scope`` if it is a Scope whose tenant and user every store's columns can hold.

    The one check of a scope, applied by every store call before any query:
    a tenant or user longer than :data:`MAX_SCOPE_LENGTH` characters, or with a
    NUL or a lone surrogate, is Validation code ``invalid_scope`` with
    ``details.field`` ``scope.tenant`` or ``scope.user`` (never stored, never a
    driver error). Not a Scope at all is TypeError: a programming error.
    """
    if not isinstance(scope, Scope):
        raise TypeError("Store calls take a Scope as their first argument.")
    for name, value in (("tenant", scope.tenant), ("user", scope.user)):
        if len(value) > MAX_SCOPE_LENGTH:
            raise Validation(f"The scope's {name} is longer than {MAX_SCOPE_LENGTH} characters.",
                             code="invalid_scope", field=f"scope.{name}")
        try:
            json_policy.check_text(value, f"scope.{name}")
        except Validation as error:
            raise Validation(f"The scope's {name} {error.message.split(' ', 1)[1]}",
                             code="invalid_scope", field=f"scope.{name}") from None
    return scope


# -- conversation access ----------------------------------------------------------------------


def readable(scope: Scope) -> Q:
    """The conversations ``scope`` may read: its own, and the shared ones of its tenant."""
    return Q(tenant=scope.tenant) & (Q(owner=scope.user) | Q(shared=True))


def readable_conversation(scope: Scope, conversation_id: Any) -> Conversation:
    """The conversation if ``scope`` may read it; otherwise NotFound, whether or not it exists."""
    check_scope(scope)
    pk = lookup_id(conversation_id)
    try:
        return Conversation.objects.get(readable(scope), pk=pk)
    except Conversation.DoesNotExist:
        raise NotFound("No such conversation.") from None


def may_read(scope: Scope, conversation_pk: uuid.UUID) -> Exists:
    """The access check of :func:`readable_conversation` as a condition of a listing's own statement.

    Uncorrelated, so the database evaluates it once (PostgreSQL: a one-time
    filter over the page's index scan). A page read with it that comes back
    empty must still call :func:`readable_conversation`, to answer NotFound for
    a conversation the scope may not see rather than an empty page.
    """
    return Exists(Conversation.objects.filter(readable(scope), pk=conversation_pk))


def can_read(scope: Scope, conversation: Conversation) -> bool:
    """Whether ``scope`` may read this loaded conversation (the check :func:`readable` makes in SQL)."""
    return conversation.tenant == scope.tenant and (conversation.owner == scope.user or conversation.shared)


def check_writable(scope: Scope, conversation: Conversation | None) -> Conversation:
    """The loaded conversation if ``scope`` owns it; a reader gets 403, anyone else 404, whether or not it exists."""
    if conversation is None or not can_read(scope, conversation):
        raise NotFound("No such conversation.")
    if conversation.owner != scope.user:
        raise ConversationNotOwned()
    return conversation


def writable_conversation(scope: Scope, conversation_id: Any, *, for_update: bool = False) -> Conversation:
    """The conversation if ``scope`` owns it.

    A reader of a shared conversation gets ConversationNotOwned (403); anyone
    else NotFound (404). With ``for_update`` the row is locked until the
    surrounding transaction ends (SQLite's IMMEDIATE transaction already holds
    the database's write lock).
    """
    check_scope(scope)
    pk = lookup_id(conversation_id)
    queryset = Conversation.objects.filter(readable(scope), pk=pk)
    if for_update:
        queryset = queryset.select_for_update()
    conversation = queryset.first()
    if conversation is None:
        raise NotFound("No such conversation.")
    if conversation.owner != scope.user:
        raise ConversationNotOwned()
    return conversation


def ids_of(values: Sequence[Any], what: str) -> list[uuid.UUID]:
    return [lookup_id(value, what) for value in values]


#: The largest value a PositiveBigIntegerField holds on every backend.
MAX_EPOCH = 2**63 - 1


def clean_epoch(value: Any) -> int | None:
    """A producer's lease epoch (a whole number, 0 or more), or None for "not a producer write".

    Checked before it reaches a query, so a bad epoch is Validation rather than
    a ValueError from the field or an overflow from the driver.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_EPOCH:
        raise Validation("epoch must be a whole number, 0 or more.", field="epoch")
    return value


def bump_counter(scope: Scope, conversation_pk: uuid.UUID, counter: str, by: int, **also: Any) -> int | None:
    """Raise a counter column of the scope's own conversation in one statement; its new value, or None.

    ``UPDATE ... SET counter = counter + by, <also> WHERE pk, tenant, owner
    RETURNING counter`` (PostgreSQL, and SQLite >= 3.35): the row stays
    write-locked until the surrounding transaction ends, so the numbers below
    the returned value are the caller's alone. None when the scope does not own
    the conversation (the caller tells NotFound from ConversationNotOwned).
    """
    meta = Conversation._meta
    quote = connection.ops.quote_name
    column = quote(meta.get_field(counter).column)
    assignments = [f"{column} = {column} + %s"]
    params: list[Any] = [by]
    for name, value in also.items():
        field = meta.get_field(name)
        assignments.append(f"{quote(field.column)} = %s")
        params.append(field.get_db_prep_value(value, connection))
    where = " AND ".join(f"{quote(meta.get_field(name).column)} = %s" for name in ("id", "tenant", "owner"))
    params += [meta.pk.get_db_prep_value(conversation_pk, connection), scope.tenant, scope.user]
    sql = f"UPDATE {quote(meta.db_table)} SET {', '.join(assignments)} WHERE {where} RETURNING {column}"
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    return None if row is None else row[0]
