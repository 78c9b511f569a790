"""Turn supervision: one row per conversation saying who produces its turn, and fencing.

The row is the conversation's mutex (a live RUNNING row refuses a second turn)
and its ownership lease: every claim raises ``Conversation.epoch`` and writes
the row at that epoch, and every producer write goes through :func:`fence`,
which fails once a newer epoch holds the conversation.
"""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from ..exceptions import Fenced
from ..models import SupervisionStatus, TurnSupervision
from .base import lookup_id


def fence(conversation_id: Any, epoch: int) -> None:
    """Prove that ``epoch`` still holds the conversation; raise Fenced when it does not.

    Call it INSIDE the caller's ``transaction.atomic()``, before the producer's
    write: the UPDATE keeps the supervision row locked until the caller
    commits, so a concurrent claim waits for the write instead of slipping in
    between the check and the write. It also stamps the heartbeat, since a
    producer that can write is alive.
    """
    pk = lookup_id(conversation_id)
    held = TurnSupervision.objects.filter(
        conversation_id=pk, epoch=epoch, status=SupervisionStatus.RUNNING
    ).update(heartbeat_at=timezone.now())
    if not held:
        raise Fenced(conversation_id=str(pk), epoch=epoch)
