"""Both store families follow the protocols, method for method and parameter for parameter.

The protocols of ``agent_persistence.stores.protocols`` are the contract the
accessors are typed by; a method added to an ORM store but not to its
protocol (or to the memory twin) fails here, so the three never drift apart.
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest
from django.utils.module_loading import import_string

from agent_persistence.conf import DEFAULTS
from agent_persistence.stores.family import SLOTS, STORE_SETTINGS
from agent_persistence.stores.memory import MEMORY_STORES
from agent_persistence.stores.memory.family import stores as memory_family
from agent_persistence.stores.orm.family import stores as orm_family

PROTOCOLS = {slot.name: slot.protocol for slot in SLOTS}


def classes_of(name: str) -> list[type]:
    """The ORM and the in-memory class of the store ``name``, as their families build them."""
    return [type(getattr(family(), name)) for family in (orm_family, memory_family)]


def public_methods(cls: type) -> set[str]:
    return {name for name, value in vars(cls).items() if callable(value) and not name.startswith("_")}


def parameters(function: Any) -> list[tuple[str, Any]]:
    return [(p.name, p.kind) for p in inspect.signature(function).parameters.values()]


def test_every_store_setting_has_a_protocol_and_a_memory_class() -> None:
    """The deprecated keys, MEMORY_STORES and the family's slots name the same stores."""
    store_settings = {name for name in DEFAULTS if name.endswith("_STORE")}
    assert store_settings == set(STORE_SETTINGS) == set(MEMORY_STORES)
    for slot in SLOTS:
        assert import_string(MEMORY_STORES[slot.setting]) is classes_of(slot.name)[1]


def declared(protocol: type) -> set[str]:
    """The protocol's methods and their async twins (a protocol may leave the twins implied)."""
    methods = public_methods(protocol)
    return methods | {f"a{name}" for name in methods if not inspect.iscoroutinefunction(getattr(protocol, name))}


@pytest.mark.parametrize("store", sorted(PROTOCOLS))
def test_both_families_have_exactly_the_protocols_methods(store: str) -> None:
    protocol = PROTOCOLS[store]
    for store_class in classes_of(store):
        assert public_methods(protocol) <= public_methods(store_class) <= declared(protocol), store_class
        assert isinstance(store_class.__new__(store_class), protocol)


@pytest.mark.parametrize("store", sorted(PROTOCOLS))
def test_the_sync_methods_take_the_protocols_parameters(store: str) -> None:
    protocol = PROTOCOLS[store]
    for name in public_methods(protocol):
        if inspect.iscoroutinefunction(getattr(protocol, name)):
            continue  # async twins forward (*args, **kwargs) to their sync method
        expected = parameters(getattr(protocol, name))
        for store_class in classes_of(store):
            assert parameters(getattr(store_class, name)) == expected, f"{store_class}.{name}"


@pytest.mark.parametrize("store", sorted(PROTOCOLS))
def test_every_sync_method_has_its_async_twin(store: str) -> None:
    for store_class in classes_of(store):
        assert declared(PROTOCOLS[store]) <= public_methods(store_class), store_class
