"""Signals the app sends, and what a receiver in this process may read while one is sent.

``conversation_updated`` fires after each completed turn, once the transaction
that stored it has committed, with ids only::

    conversation_updated.send(sender=Conversation, tenant=..., conversation_id=..., message_id=..., run_id=...)

The turn store sends it inside :func:`sealing`, so a receiver in the sending
process reads the sealed turn with :func:`sealed_view` instead of reading it
back from the database; receivers elsewhere (and signals sent by other code)
get None and read the turn themselves. This sits beside the signal, not in the
runtime, because the stores send it and stores never import the runtime.
"""

from __future__ import annotations

import uuid
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Iterator

from django.dispatch import Signal

conversation_updated = Signal()

#: The sealed turn being announced: the turn store's view of it (a ``TurnView``) while
#: ``conversation_updated`` (ids only) is sent, for receivers in this process.
_sealed_view: ContextVar[Any] = ContextVar("agent_persistence_sealed_view", default=None)


@contextmanager
def sealing(view: Any) -> Iterator[None]:
    """Within the block (the signal's send), :func:`sealed_view` gives ``view``."""
    token = _sealed_view.set(view)
    try:
        yield
    finally:
        _sealed_view.reset(token)


def sealed_view(message_id: uuid.UUID) -> Any:
    """The store's view of the sealed turn ``message_id`` while it is being announced; None otherwise
    (a signal sent by other code, or for another turn)."""
    view = _sealed_view.get()
    return view if view is not None and view.message_id == message_id else None
