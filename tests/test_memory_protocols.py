"""Both store families follow the protocols, method for method and parameter for parameter.

The protocols of ``agent_persistence.stores.protocols`` are the contract the
accessors are typed by; a method added to an ORM store but not to its
protocol (or to the memory twin) fails here, so the three never drift apart.
"""

from __future__ import annotations

import inspect
import threading
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.utils.module_loading import import_string

from agent_persistence.conf import DEFAULTS
from agent_persistence.stores import protocols
from agent_persistence.stores.family import SLOTS, STORE_SETTINGS
from agent_persistence.stores.memory import MEMORY_STORES
from agent_persistence.stores.memory.family import stores as memory_family
from agent_persistence.stores.orm.family import stores as orm_family
from agent_persistence.stores.twins import twins_of

PROTOCOLS = {slot.name: slot.protocol for slot in SLOTS}


def classes_of(name: str) -> list[type]:
    """The ORM and the in-memory class of the store ``name``, as their families build them."""
    return [type(getattr(family(), name)) for family in (orm_family, memory_family)]


def public_methods(cls: type) -> set[str]:
    """The public methods of ``cls`` and its bases (a store inherits its async twins from ``twins_of(protocol)``)."""
    return {
        name
        for klass in cls.__mro__
        if klass is not object
        for name, value in vars(klass).items()
        if callable(value) and not name.startswith("_")
    }


def parameters(function: Any) -> list[tuple[str, Any]]:
    return [(p.name, p.kind) for p in inspect.signature(function).parameters.values()]


def test_every_store_setting_has_a_protocol_and_a_memory_class() -> None:
    """The deprecated keys, MEMORY_STORES and the family's slots name the same stores."""
    store_settings = {name for name in DEFAULTS if name.endswith("_STORE")}
    assert store_settings == set(STORE_SETTINGS) == set(MEMORY_STORES)
    for slot in SLOTS:
        if slot.setting is None:  # a slot added after STORES never had a key
            continue
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


@pytest.mark.parametrize("store", sorted(PROTOCOLS))
def test_the_twins_are_built_once_per_protocol_and_forward_to_the_sync_method(store: str) -> None:
    """Both families inherit one twins class per protocol; each twin is ``a<name>(self, *args, **kwargs)``."""
    protocol = PROTOCOLS[store]
    orm_class, memory_class = classes_of(store)
    (twins,) = {klass for klass in orm_class.__mro__ if klass.__name__.endswith("Twins")}
    assert twins in memory_class.__mro__ and twins is twins_of(protocol)
    for name in public_methods(protocol):
        twin = getattr(orm_class, f"a{name}")
        assert inspect.iscoroutinefunction(twin) and twin.__name__ == f"a{name}"
        assert [name for name, _ in parameters(twin)] == ["self", "args", "kwargs"]
        assert [kind for _, kind in parameters(twin)][1:] == [inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD]
        assert twin.__doc__ == f"Async twin of :meth:`{name}`."


class Recorder(twins_of(protocols.MetadataStoreProtocol)):  # type: ignore[misc]
    """A metadata store whose ``get`` says which thread ran it, and whose ``delete`` raises."""

    def get(self, scope: Any, namespace: str, key: str, default: Any = None) -> Any:
        return (threading.get_ident(), scope, namespace, key, default)

    def delete(self, scope: Any, namespace: str, key: str) -> bool:
        raise LookupError(key)


def test_a_twin_runs_its_sync_method_in_the_sync_thread_with_its_arguments() -> None:
    store = Recorder()

    async def call() -> Any:
        return threading.get_ident(), await store.aget("scope", "ns", key="k", default=1)

    loop_thread, (sync_thread, *arguments) = async_to_sync(call)()
    assert arguments == ["scope", "ns", "k", 1]
    assert sync_thread != loop_thread
    with pytest.raises(LookupError):
        async_to_sync(store.adelete)("scope", "ns", "gone")
