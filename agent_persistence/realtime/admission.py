"""Which conversation a socket (or a socket ticket) may open: a readable one, or a new id.

A frontend names a brand-new conversation by choosing its id (a UUID) and
starting a turn in it, as TanStack AI and the AI SDK create threads
implicitly. So a socket to an id that no conversation has is admitted, idle:
its first ``start`` creates the conversation, owned by the socket's user, in
the same transaction as the turn (the turn store's ``begin``, the path
``POST conversations/<id>/turns/`` takes), so a refused start creates
nothing and two sockets starting one new id make one conversation and one
turn. An id that a conversation the user may not read has stays not found,
and so does a value that is no UUID.
"""

from __future__ import annotations

import uuid
from typing import Any

from ..exceptions import NotFound
from ..scope import Scope
from ..stores import conversation_store, turn_store
from ..stores.rules.base import lookup_id


def conversation_to_open(scope: Scope, conversation_id: Any) -> tuple[uuid.UUID, bool]:
    """The conversation's id and whether it exists; NotFound when it is another's or ``conversation_id`` is no UUID."""
    try:
        return conversation_store().get(scope, conversation_id).pk, True
    except NotFound as refused:
        pk = lookup_id(conversation_id)  # NotFound for a value that is no UUID (NUL, lone surrogate, too long...)
        try:
            turn_store().scope_of(pk)
        except NotFound:
            return pk, False
        try:
            # Read once more: another tab's start (on this server or another) may have made the caller's
            # conversation between the two reads above.
            return conversation_store().get(scope, pk).pk, True
        except NotFound:
            raise refused from None  # someone else's: it reads as absent, and a start in it would be refused
