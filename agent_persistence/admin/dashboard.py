"""The operators' dashboard on the app's admin index, computed when the page is read.

Live and dead turns per replica come from the running supervision rows and
the ``DEAD_AFTER`` setting, judged exactly as :func:`status_of` judges one
row (a heartbeat older than ``DEAD_AFTER`` seconds is a dead producer);
nothing "dead" is stored. Two statements per page view: one grouped count of
the supervision rows, one count of pending interrupts.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cached_property

from django.db.models import Count, Min, Q
from django.utils import timezone

from ..conf import app_settings
from ..models import Interrupt, InterruptStatus, SupervisionStatus, TurnSupervision


def age(now: datetime, then: datetime | None) -> float | None:
    """Seconds from ``then`` to ``now`` (never negative: another replica's clock may run ahead)."""
    return None if then is None else max(0.0, (now - then).total_seconds())


@dataclass(frozen=True)
class ReplicaTurns:
    """The running turns one replica produces, as of ``Dashboard.now``."""

    replica: str
    live: int
    dead: int
    oldest_live_heartbeat: float | None
    oldest_dead_heartbeat: float | None


@dataclass(frozen=True)
class Dashboard:
    """What an operator wants first: who runs what, what is stuck, what waits for a person."""

    now: datetime
    dead_after: float
    replicas: list[ReplicaTurns]
    pending_interrupts: int
    lapsed_interrupts: int

    @property
    def live(self) -> int:
        return sum(replica.live for replica in self.replicas)

    @property
    def dead(self) -> int:
        return sum(replica.dead for replica in self.replicas)

    @property
    def oldest_live_heartbeat(self) -> float | None:
        return max((r.oldest_live_heartbeat for r in self.replicas if r.oldest_live_heartbeat is not None), default=None)

    @property
    def oldest_dead_heartbeat(self) -> float | None:
        return max((r.oldest_dead_heartbeat for r in self.replicas if r.oldest_dead_heartbeat is not None), default=None)


def compute_dashboard(now: datetime | None = None) -> Dashboard:
    now = now or timezone.now()
    dead_after = float(app_settings.DEAD_AFTER)
    cutoff = now - timedelta(seconds=dead_after)
    # status_of: dead iff the heartbeat age is > DEAD_AFTER, i.e. heartbeat_at < cutoff.
    live, dead = Q(heartbeat_at__gte=cutoff), Q(heartbeat_at__lt=cutoff)
    rows = (
        TurnSupervision.objects.filter(status=SupervisionStatus.RUNNING)
        .values("replica")
        .annotate(
            live=Count("pk", filter=live),
            dead=Count("pk", filter=dead),
            oldest_live=Min("heartbeat_at", filter=live),
            oldest_dead=Min("heartbeat_at", filter=dead),
        )
        .order_by("replica")
    )
    replicas = [
        ReplicaTurns(
            replica=row["replica"],
            live=row["live"],
            dead=row["dead"],
            oldest_live_heartbeat=age(now, row["oldest_live"]),
            oldest_dead_heartbeat=age(now, row["oldest_dead"]),
        )
        for row in rows
    ]
    interrupts = Interrupt.objects.filter(status=InterruptStatus.PENDING).aggregate(
        pending=Count("pk"), lapsed=Count("pk", filter=Q(expires_at__lt=now))
    )
    return Dashboard(
        now=now,
        dead_after=dead_after,
        replicas=replicas,
        pending_interrupts=interrupts["pending"],
        lapsed_interrupts=interrupts["lapsed"],
    )


class LazyDashboard:
    """The dashboard, computed on first use by a template (the admin builds its app list on every page)."""

    @cached_property
    def summary(self) -> Dashboard:
        return compute_dashboard()
