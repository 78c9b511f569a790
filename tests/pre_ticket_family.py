"""A store family module written before the ticket slot existed: its ``Stores`` names no ``tickets`` (tests/test_store_families.py)."""

from __future__ import annotations

import dataclasses

from agent_persistence.stores.family import Stores
from agent_persistence.stores.orm.family import stores as orm_stores


def stores() -> Stores:
    family = orm_stores()
    return Stores(**{field.name: getattr(family, field.name) for field in dataclasses.fields(Stores) if field.name != "tickets"})
