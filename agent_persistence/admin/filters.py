"""List filters judged at read time: a turn is alive or dead by its heartbeat's age now."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import Q, QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from ..models import SupervisionStatus
from ..statuses import QUEUED_REPLICA
from ..stores.rules.supervision import dead_q


def live_state_q(state: str, prefix: str = "") -> Q:
    """The rows whose supervision reads ``state`` now (``prefix`` reaches it from another model)."""
    running = Q(**{f"{prefix}status": SupervisionStatus.RUNNING})
    queued = Q(**{f"{prefix}replica": QUEUED_REPLICA})
    dead = dead_q(timezone.now(), prefix)
    if state == "alive":
        return running & ~queued & ~dead
    if state == "queued":  # TURN_RUNNER "tasks": enqueued, no worker took it yet (until its first heartbeat)
        return running & queued & ~dead
    if state == "dead":
        return dead
    if state == "idle":
        return Q(**{f"{prefix}status__isnull": True})
    if state == "handing_off":  # stored handed_off: released at a shutdown, claimable at once
        return Q(**{f"{prefix}status": SupervisionStatus.HANDED_OFF})
    return Q(**{f"{prefix}status": state})


class LiveStatusFilter(admin.SimpleListFilter):
    """queued / alive / dead / handing_off / done / errored, as the live status column says."""

    title = _("live status")
    parameter_name = "live"
    prefix = ""
    states = ("queued", "alive", "dead", "handing_off", "done", "errored")

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(state, state) for state in self.states]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() not in self.states:
            return queryset
        return queryset.filter(live_state_q(self.value(), self.prefix))


class ConversationLiveStatusFilter(LiveStatusFilter):
    """The same, for conversations (``idle``: no turn was ever claimed)."""

    prefix = "supervision__"
    states = ("queued", "alive", "dead", "handing_off", "done", "errored", "idle")
