"""Compiled statements and the rows they read: a queryset compiled once, run with each call's values.

A hot listing (a transcript page) is a queryset compiled to SQL once
(:func:`compile_statement`), its variable values slots that each call fills
(:meth:`Statement.params`); :func:`read_models` runs it through Django's cursor
and builds the model instances with less work per row than the ORM
(:func:`instance_builder`). Both backends run them; PostgreSQL's faster time
loader is the dialect's (:meth:`~agent_persistence.stores.dialects.Dialect.load_times_natively`).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from django.db import connections
from django.db.models import JSONField, Model
from django.db.models.base import ModelState
from django.db.models.fields.related_descriptors import ForeignKeyDeferredAttribute
from django.db.models.query_utils import DeferredAttribute
from django.db.models.signals import post_init, pre_init

from .. import json_policy
from .dialects import dialect_for


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
    (the dialect's ``load_times_natively``); instances are built by :func:`instance_builder`.
    """
    database = connections[using]
    with database.cursor() as cursor:
        dialect_for(database).load_times_natively(database, cursor)
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
