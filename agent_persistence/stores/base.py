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
from datetime import timezone as dt_timezone
from typing import Any, Callable, Sequence

from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.models import Count, Exists, JSONField, Model, Q, Subquery, Window
from django.db.models.base import ModelState
from django.db.models.fields.related_descriptors import ForeignKeyDeferredAttribute
from django.db.models.query_utils import DeferredAttribute
from django.db.models.signals import post_init, pre_init

from .. import json_policy
from ..exceptions import ConversationNotOwned, NotFound, Validation
from ..models import Conversation
from ..scope import Scope
from .rules.base import (  # re-exported: these rules moved to agent_persistence/stores/rules/base.py
    MAX_EPOCH as MAX_EPOCH,
    MAX_OFFSET as MAX_OFFSET,
    MAX_SCOPE_LENGTH as MAX_SCOPE_LENGTH,
    UNSET as UNSET,
    clean_datetime as clean_datetime,
    clean_epoch as clean_epoch,
    clean_json as clean_json,
    clean_object as clean_object,
    clean_order as clean_order,
    clean_paging as clean_paging,
    clean_text as clean_text,
    json_size as json_size,
    page_of_rows as page_of_rows,
    parse_id as parse_id,
)
from .rules.base import (
    Page,
    can_read,
    check_scope,
    clean_with_total,
    lookup_id,
)
from .twins import async_twin as async_twin
from .twins import heal_connections as heal_connections
from .twins import healed as healed

# -- cleaning input ---------------------------------------------------------------------------


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
