"""The in-memory lease store: keyed, expiring locks, one holder per (tenant, key), decided under the family's lock."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ...conf import app_settings
from ...exceptions import Validation
from ...models import Lease
from ..protocols import LeaseStoreProtocol
from ..rules.base import Page, clean_object, clean_paging, clean_text
from ..rules.leases import KEY_MAX_LENGTH, LeaseResult, _clean_holder, _clean_key, _clean_now, _clean_tenant, _expiry
from ..twins import twins_of
from .conversations import page_of
from .database import DEFAULT_DATABASE, MemoryDatabase, clone


class MemoryLeaseStore(twins_of(LeaseStoreProtocol)):
    """Acquire, renew, release, flag and list keyed leases, in a :class:`MemoryDatabase`."""

    def __init__(self, database: MemoryDatabase | None = None) -> None:
        self.db = database or DEFAULT_DATABASE

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
        tenant, key, holder = _clean_tenant(tenant), _clean_key(key), _clean_holder(holder)
        now = _clean_now(now)
        expires_at = _expiry(now, ttl)
        new_metadata = None if metadata is None else clean_object(metadata, "metadata")
        with self.db.lock:
            current = self.db.leases.get((tenant, key))
            if current is None:
                self.db.lease_ids += 1
                lease = Lease(
                    id=self.db.lease_ids,
                    tenant=tenant,
                    key=key,
                    holder=holder,
                    acquired_at=now,
                    expires_at=expires_at,
                    metadata=new_metadata or {},
                )
                self.db.leases[(tenant, key)] = lease
                return LeaseResult(acquired=True, lease=clone(lease))
            if current.expires_at <= now:
                previous = current.holder
                current.holder, current.acquired_at, current.expires_at = holder, now, expires_at
                current.cancel_requested, current.metadata = False, new_metadata or {}
                return LeaseResult(acquired=True, lease=clone(current), taken_over=True, previous_holder=previous)
            if current.holder == holder:
                current.expires_at = expires_at
                if new_metadata is not None:
                    current.metadata = new_metadata
                return LeaseResult(acquired=True, lease=clone(current))
            return LeaseResult(acquired=False, lease=clone(current))

    def renew(self, tenant: str, key: str, holder: str, *, ttl: float, now: datetime | None = None) -> Lease | None:
        tenant, key, holder = _clean_tenant(tenant), _clean_key(key), _clean_holder(holder)
        now = _clean_now(now)
        expires_at = _expiry(now, ttl)
        with self.db.lock:
            lease = self.db.leases.get((tenant, key))
            if lease is None or lease.holder != holder or lease.expires_at <= now:
                return None
            lease.expires_at = expires_at
            return clone(lease)

    def release(self, tenant: str, key: str, holder: str) -> bool:
        tenant, key, holder = _clean_tenant(tenant), _clean_key(key), _clean_holder(holder)
        with self.db.lock:
            lease = self.db.leases.get((tenant, key))
            if lease is None or lease.holder != holder:
                return False
            del self.db.leases[(tenant, key)]
            return True

    def mark_cancel(self, tenant: str, key: str, *, now: datetime | None = None) -> bool:
        tenant, key = _clean_tenant(tenant), _clean_key(key)
        now = _clean_now(now)
        with self.db.lock:
            lease = self.db.leases.get((tenant, key))
            if lease is None or lease.expires_at <= now:
                return False
            lease.cancel_requested = True
            return True

    def get(self, tenant: str, keys: list[str], *, now: datetime | None = None) -> list[Lease]:
        tenant = _clean_tenant(tenant)
        if not isinstance(keys, (list, tuple, set, frozenset)):
            raise Validation("keys must be a list.", field="keys")
        if len(keys) > app_settings.MAX_PAGE_SIZE:
            raise Validation(f"At most {app_settings.MAX_PAGE_SIZE} keys at once.", field="keys")
        wanted = {_clean_key(key) for key in keys}
        now = _clean_now(now)
        with self.db.lock:
            live = [lease for (t, k), lease in self.db.leases.items() if t == tenant and k in wanted and lease.expires_at > now]
            return [clone(lease) for lease in sorted(live, key=lambda lease: lease.key)]

    def _prefixed(self, tenant: Any, prefix: Any, limit: Any, offset: Any) -> tuple[list[Lease], int, int]:
        tenant = _clean_tenant(tenant)
        prefix = clean_text(prefix, "prefix", max_length=KEY_MAX_LENGTH)
        limit, offset = clean_paging(limit, offset)
        leases = [lease for (t, k), lease in self.db.leases.items() if t == tenant and k.startswith(prefix)]
        return leases, limit, offset

    def list_live(
        self, tenant: str, prefix: str = "", *, now: datetime | None = None, limit: int | None = None, offset: int = 0
    ) -> Page[Lease]:
        with self.db.lock:
            leases, limit, offset = self._prefixed(tenant, prefix, limit, offset)
            now = _clean_now(now)
            live = sorted((lease for lease in leases if lease.expires_at > now), key=lambda lease: lease.key)
            return page_of(live, limit, offset)

    def list_expired(
        self, tenant: str, prefix: str = "", *, now: datetime | None = None, limit: int | None = None, offset: int = 0
    ) -> Page[Lease]:
        with self.db.lock:
            leases, limit, offset = self._prefixed(tenant, prefix, limit, offset)
            now = _clean_now(now)
            expired = sorted(
                (lease for lease in leases if lease.expires_at <= now), key=lambda lease: (lease.expires_at, lease.key)
            )
            return page_of(expired, limit, offset)
