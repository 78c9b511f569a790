"""The lease store: generic keyed, expiring locks, one holder per (tenant, key).

A lease is live while ``now < expires_at``. Every change is a conditional
UPDATE or DELETE whose filter names the state it expects (the holder, the
expiry it read) and whose row count says whether it happened, so two
contenders can never both win, on PostgreSQL or SQLite. A lost race is simply
re-evaluated against the row that won it.

``now`` arguments exist so callers (and tests) can control time; they default
to :func:`django.utils.timezone.now`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models.functions import Substr

from ..conf import app_settings
from ..exceptions import Conflict, Validation
from ..models import Lease
from .base import Page, clean_object, clean_paging, clean_text, paginate
from .protocols import LeaseStoreProtocol
from .rules.leases import (  # re-exported: these rules moved to agent_persistence/stores/rules/leases.py
    HOLDER_MAX_LENGTH as HOLDER_MAX_LENGTH,
    TENANT_MAX_LENGTH as TENANT_MAX_LENGTH,
    _clean_name as _clean_name,
)
from .rules.leases import (
    KEY_MAX_LENGTH,
    LeaseResult,
    _clean_holder,
    _clean_key,
    _clean_now,
    _clean_tenant,
    _expiry,
)
from .twins import twins_of

# Each retry follows a write that beat ours, after which the row is normally live and the answer
# settles; the bound guards against churn (acquire/release loops) and clocks skewed beyond the ttl.
MAX_ATTEMPTS = 5


class LeaseStore(twins_of(LeaseStoreProtocol)):
    """Acquire, renew, release, flag and list keyed leases within a tenant."""

    def acquire(
        self,
        tenant: str,
        key: str,
        holder: str,
        *,
        ttl: float,
        metadata: dict[str, Any] | None = None,
        now: datetime | None = None,
    ) -> LeaseResult:
        """Take the lease for ``ttl`` seconds if it is free, expired or already ``holder``'s.

        Free: a new lease. Already mine and live: its expiry moves to
        ``now + ttl`` (and ``metadata`` replaces the old one when given); a
        pending cancel stays pending. Expired, whoever held it: taken over, with
        ``cancel_requested`` cleared and ``acquired_at`` reset. Otherwise not
        acquired, and ``lease`` is the current holder's.
        """
        tenant, key, holder = _clean_tenant(tenant), _clean_key(key), _clean_holder(holder)
        now = _clean_now(now)
        expires_at = _expiry(now, ttl)
        new_metadata = None if metadata is None else clean_object(metadata, "metadata")
        for _ in range(MAX_ATTEMPTS):
            with transaction.atomic():
                result = self._try_acquire(tenant, key, holder, now, expires_at, new_metadata)
            if result is not None:
                return result
        raise Conflict("The lease kept changing hands; retry.", code="lease_contended")

    def _try_acquire(
        self,
        tenant: str,
        key: str,
        holder: str,
        now: datetime,
        expires_at: datetime,
        metadata: dict[str, Any] | None,
    ) -> LeaseResult | None:
        """One read-decide-write round; None when a concurrent write changed the row first."""
        current = Lease.objects.filter(tenant=tenant, key=key).first()
        if current is None:
            lease = _insert(tenant, key, holder, now, expires_at, metadata)
            return None if lease is None else LeaseResult(acquired=True, lease=lease)
        as_read = Lease.objects.filter(pk=current.pk, holder=current.holder, expires_at=current.expires_at)
        if current.expires_at <= now:
            taken = as_read.update(
                holder=holder, acquired_at=now, expires_at=expires_at, cancel_requested=False, metadata=metadata or {}
            )
            if taken != 1:
                return None
            return LeaseResult(
                acquired=True, lease=Lease.objects.get(pk=current.pk), taken_over=True, previous_holder=current.holder
            )
        if current.holder == holder:
            changes: dict[str, Any] = {"expires_at": expires_at}
            if metadata is not None:
                changes["metadata"] = metadata
            if as_read.update(**changes) != 1:
                return None
            return LeaseResult(acquired=True, lease=Lease.objects.get(pk=current.pk))
        return LeaseResult(acquired=False, lease=current)

    def renew(self, tenant: str, key: str, holder: str, *, ttl: float, now: datetime | None = None) -> Lease | None:
        """Move a live lease's expiry to ``now + ttl``; only its holder, only before it expires.

        Returns the renewed lease (``cancel_requested`` tells the holder to
        stop), or None when ``holder`` does not hold a live lease on ``key``.
        """
        tenant, key, holder = _clean_tenant(tenant), _clean_key(key), _clean_holder(holder)
        now = _clean_now(now)
        expires_at = _expiry(now, ttl)
        with transaction.atomic():
            renewed = Lease.objects.filter(tenant=tenant, key=key, holder=holder, expires_at__gt=now).update(
                expires_at=expires_at
            )
            # The UPDATE holds the row until commit, so the read below sees our own write.
            return Lease.objects.get(tenant=tenant, key=key) if renewed else None

    def release(self, tenant: str, key: str, holder: str) -> bool:
        """Delete the lease if ``holder`` holds it (live or expired but not yet taken over)."""
        tenant, key, holder = _clean_tenant(tenant), _clean_key(key), _clean_holder(holder)
        deleted, _ = Lease.objects.filter(tenant=tenant, key=key, holder=holder).delete()
        return deleted > 0

    def mark_cancel(self, tenant: str, key: str, *, now: datetime | None = None) -> bool:
        """Ask the holder of a live lease to stop; it sees the flag on its next renew.

        False when there is no live lease on ``key``.
        """
        tenant, key = _clean_tenant(tenant), _clean_key(key)
        now = _clean_now(now)
        return Lease.objects.filter(tenant=tenant, key=key, expires_at__gt=now).update(cancel_requested=True) == 1

    def get(self, tenant: str, keys: list[str], *, now: datetime | None = None) -> list[Lease]:
        """The live leases among ``keys``, ordered by key; expired and absent keys are left out."""
        tenant = _clean_tenant(tenant)
        if not isinstance(keys, (list, tuple, set, frozenset)):
            raise Validation("keys must be a list.", field="keys")
        if len(keys) > app_settings.MAX_PAGE_SIZE:
            raise Validation(f"At most {app_settings.MAX_PAGE_SIZE} keys at once.", field="keys")
        key_list = [_clean_key(key) for key in keys]
        now = _clean_now(now)
        return list(Lease.objects.filter(tenant=tenant, key__in=key_list, expires_at__gt=now).order_by("key"))

    def list_live(
        self, tenant: str, prefix: str = "", *, now: datetime | None = None, limit: int | None = None, offset: int = 0
    ) -> Page[Lease]:
        """Live leases whose key starts with ``prefix`` (case-sensitive), ordered by key."""
        queryset, limit, offset = _prefixed(tenant, prefix, limit, offset)
        now = _clean_now(now)
        return paginate(queryset.filter(expires_at__gt=now).order_by("key"), limit, offset)

    def list_expired(
        self, tenant: str, prefix: str = "", *, now: datetime | None = None, limit: int | None = None, offset: int = 0
    ) -> Page[Lease]:
        """Expired leases whose key starts with ``prefix``, the longest expired first."""
        queryset, limit, offset = _prefixed(tenant, prefix, limit, offset)
        now = _clean_now(now)
        return paginate(queryset.filter(expires_at__lte=now).order_by("expires_at", "key"), limit, offset)


def _insert(
    tenant: str, key: str, holder: str, now: datetime, expires_at: datetime, metadata: dict[str, Any] | None
) -> Lease | None:
    """A new lease, or None when a concurrent acquirer inserted the key first."""
    try:
        with transaction.atomic():
            return Lease.objects.create(
                tenant=tenant, key=key, holder=holder, acquired_at=now, expires_at=expires_at, metadata=metadata or {}
            )
    except IntegrityError:
        return None


def _prefixed(tenant: Any, prefix: Any, limit: Any, offset: Any) -> tuple[Any, int, int]:
    tenant = _clean_tenant(tenant)
    prefix = clean_text(prefix, "prefix", max_length=KEY_MAX_LENGTH)
    limit, offset = clean_paging(limit, offset)
    queryset = Lease.objects.filter(tenant=tenant)
    if prefix:
        # startswith escapes LIKE wildcards but SQLite's LIKE ignores ASCII case; the
        # substring comparison makes the match exact on every backend.
        queryset = queryset.filter(key__startswith=prefix).alias(key_head=Substr("key", 1, len(prefix)))
        queryset = queryset.filter(key_head=prefix)
    return queryset, limit, offset
