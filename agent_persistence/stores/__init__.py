"""The stores: the atomic operations of each concern, chosen by import path in settings.

Get a store with the accessor named after it; each returns one shared instance
of the class configured in ``AGENT_PERSISTENCE`` (reset when the setting
changes)::

    from agent_persistence.stores import conversation_store
    conversation = conversation_store().get(scope, conversation_id)
"""

from __future__ import annotations

from typing import Any

_instances: dict[str, Any] = {}


def get_store(setting: str) -> Any:
    store = _instances.get(setting)
    if store is None:
        from ..conf import app_settings

        store = _instances[setting] = getattr(app_settings, setting)()
    return store


def reset_stores() -> None:
    _instances.clear()


def conversation_store() -> Any:
    return get_store("CONVERSATION_STORE")


def event_store() -> Any:
    return get_store("EVENT_STORE")


def lease_store() -> Any:
    return get_store("LEASE_STORE")


def file_store() -> Any:
    return get_store("FILE_STORE")


def task_store() -> Any:
    return get_store("TASK_STORE")


def run_store() -> Any:
    return get_store("RUN_STORE")


def interrupt_store() -> Any:
    return get_store("INTERRUPT_STORE")


def supervision_store() -> Any:
    return get_store("SUPERVISION_STORE")


def recording_store() -> Any:
    return get_store("RECORDING_STORE")


def checkpoint_store() -> Any:
    return get_store("CHECKPOINT_STORE")
