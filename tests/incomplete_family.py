"""A store family module whose ``stores()`` leaves one store out, for the system check E011 (tests/test_store_families.py)."""

from __future__ import annotations

import dataclasses

from agent_persistence.stores.family import Stores
from agent_persistence.stores.orm.family import stores as orm_stores


def stores() -> Stores:
    return dataclasses.replace(orm_stores(), turns=None, leases=object())
