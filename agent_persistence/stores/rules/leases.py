"""The backend-neutral rules of the leases concern: what both store families check and build the same way.

The ORM store (:mod:`agent_persistence.stores.leases`) and its in-memory twin
import these; nothing here reads or writes a table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from ...exceptions import Validation
from ...models import Lease
from .base import clean_datetime, clean_text

KEY_MAX_LENGTH = Lease._meta.get_field("key").max_length


HOLDER_MAX_LENGTH = Lease._meta.get_field("holder").max_length


TENANT_MAX_LENGTH = Lease._meta.get_field("tenant").max_length


@dataclass(frozen=True)
class LeaseResult:
    """The outcome of :meth:`LeaseStore.acquire`.

    ``lease`` is the caller's lease when ``acquired``, otherwise the current
    holder's. ``taken_over`` is True when the lease was acquired from an
    expired one, ``previous_holder`` naming who held it (possibly the caller
    itself).
    """

    acquired: bool
    lease: Lease
    taken_over: bool = False
    previous_holder: str | None = None


def _clean_tenant(tenant: Any) -> str:
    return clean_text(tenant, "tenant", max_length=TENANT_MAX_LENGTH)


def _clean_key(key: Any) -> str:
    return _clean_name(key, "key", KEY_MAX_LENGTH)


def _clean_holder(holder: Any) -> str:
    return _clean_name(holder, "holder", HOLDER_MAX_LENGTH)


def _clean_name(value: Any, field_name: str, max_length: int) -> str:
    value = clean_text(value, field_name, max_length=max_length)
    if not value:
        raise Validation(f"{field_name} may not be empty.", field=field_name)
    return value


def _clean_now(now: Any) -> datetime:
    return clean_datetime(now, "now") or timezone.now()


def _expiry(now: datetime, ttl: Any) -> datetime:
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)):
        raise Validation("ttl must be a number of seconds.", field="ttl")
    try:
        seconds = float(ttl)
        if not math.isfinite(seconds) or seconds <= 0:
            raise ValueError
        return now + timedelta(seconds=seconds)
    except (OverflowError, ValueError):
        raise Validation("ttl must be a finite number of seconds, greater than 0.", field="ttl") from None
