"""Conversation access in SQL: the conversations a scope may read or write, and its own counters.

The same rule as :func:`~agent_persistence.stores.rules.base.can_read` (which
checks a loaded conversation), as a condition of a statement: a scope reads its
own conversations and the shared ones of its tenant, and writes only its own.
A conversation out of reach is NotFound whether or not it exists.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.db import connection
from django.db.models import Exists, Q

from ..exceptions import ConversationNotOwned, NotFound
from ..models import Conversation
from ..scope import Scope
from .rules.base import check_scope, lookup_id


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
