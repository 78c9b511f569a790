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
from agent_persistence.stores import protocols
from agent_persistence.stores.memory import MEMORY_STORES

PROTOCOLS = {
    "TURN_STORE": protocols.TurnStoreProtocol,
    "CONVERSATION_STORE": protocols.ConversationStoreProtocol,
    "EVENT_STORE": protocols.EventStoreProtocol,
    "LEASE_STORE": protocols.LeaseStoreProtocol,
    "FILE_STORE": protocols.FileStoreProtocol,
    "TASK_STORE": protocols.TaskStoreProtocol,
    "RUN_STORE": protocols.RunStoreProtocol,
    "INTERRUPT_STORE": protocols.InterruptStoreProtocol,
    "SUPERVISION_STORE": protocols.SupervisionStoreProtocol,
    "RECORDING_STORE": protocols.RecordingStoreProtocol,
    "CHECKPOINT_STORE": protocols.CheckpointStoreProtocol,
    "BLOB_STORE": protocols.BlobStoreProtocol,
    "ARTIFACT_STORE": protocols.ArtifactStoreProtocol,
    "GENERATION_RUN_STORE": protocols.GenerationRunStoreProtocol,
}
PROTOCOLS.update({
    "ACTIVITY_STORE": protocols.ActivityStoreProtocol,
    "METADATA_STORE": protocols.MetadataStoreProtocol,
})


def public_methods(cls: type) -> set[str]:
    return {name for name, value in vars(cls).items() if callable(value) and not name.startswith("_")}


def parameters(function: Any) -> list[tuple[str, Any]]:
    return [(p.name, p.kind) for p in inspect.signature(function).parameters.values()]


def test_every_store_setting_has_a_protocol_and_a_memory_class() -> None:
    store_settings = {name for name in DEFAULTS if name.endswith("_STORE")}
    assert store_settings == set(PROTOCOLS) == set(MEMORY_STORES)


def declared(protocol: type) -> set[str]:
    """The protocol's methods and their async twins (a protocol may leave the twins implied)."""
    methods = public_methods(protocol)
    return methods | {f"a{name}" for name in methods if not inspect.iscoroutinefunction(getattr(protocol, name))}


@pytest.mark.parametrize("setting", sorted(PROTOCOLS))
def test_both_families_have_exactly_the_protocols_methods(setting: str) -> None:
    protocol = PROTOCOLS[setting]
    for path in (DEFAULTS[setting], MEMORY_STORES[setting]):
        store_class = import_string(path)
        assert public_methods(protocol) <= public_methods(store_class) <= declared(protocol), path
        assert isinstance(store_class.__new__(store_class), protocol)


@pytest.mark.parametrize("setting", sorted(PROTOCOLS))
def test_the_sync_methods_take_the_protocols_parameters(setting: str) -> None:
    protocol = PROTOCOLS[setting]
    for name in public_methods(protocol):
        if inspect.iscoroutinefunction(getattr(protocol, name)):
            continue  # async twins forward (*args, **kwargs) to their sync method
        expected = parameters(getattr(protocol, name))
        for path in (DEFAULTS[setting], MEMORY_STORES[setting]):
            assert parameters(getattr(import_string(path), name)) == expected, f"{path}.{name}"


@pytest.mark.parametrize("setting", sorted(PROTOCOLS))
def test_every_sync_method_has_its_async_twin(setting: str) -> None:
    for path in (DEFAULTS[setting], MEMORY_STORES[setting]):
        assert declared(PROTOCOLS[setting]) <= public_methods(import_string(path)), path
