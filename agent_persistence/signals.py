"""Signals the app sends.

``conversation_updated`` fires after each completed turn, once the transaction
that stored it has committed, with ids only::

    conversation_updated.send(sender=Conversation, tenant=..., conversation_id=..., message_id=..., run_id=...)
"""

from __future__ import annotations

from django.dispatch import Signal

conversation_updated = Signal()
