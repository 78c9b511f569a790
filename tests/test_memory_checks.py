"""System check W002: the in-memory stores are refused quietly in DEBUG and warned about otherwise."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import Warning, run_checks
from django.test import override_settings

from agent_persistence.stores.memory import MEMORY_STORES


def memory_warnings() -> list[Any]:
    return [message for message in run_checks() if message.id == "agent_persistence.W002"]


def configured(**stores: str) -> dict[str, Any]:
    return {**(getattr(settings, "AGENT_PERSISTENCE", None) or {}), **stores}


def test_the_whole_memory_family_without_debug_is_warned_about() -> None:
    with override_settings(DEBUG=False, AGENT_PERSISTENCE=configured(**MEMORY_STORES)):
        (warning,) = memory_warnings()
    assert isinstance(warning, Warning)
    for name in MEMORY_STORES:
        assert name in warning.msg
    assert "test-your-agents-in-memory" in warning.hint


def test_one_memory_store_without_debug_is_named() -> None:
    with override_settings(DEBUG=False, AGENT_PERSISTENCE=configured(EVENT_STORE=MEMORY_STORES["EVENT_STORE"])):
        (warning,) = memory_warnings()
    assert "EVENT_STORE" in warning.msg and "CONVERSATION_STORE" not in warning.msg


def test_memory_stores_in_debug_and_orm_stores_without_it_pass() -> None:
    with override_settings(DEBUG=True, AGENT_PERSISTENCE=configured(**MEMORY_STORES)):
        assert memory_warnings() == []
    with override_settings(DEBUG=False, AGENT_PERSISTENCE=configured()):
        assert memory_warnings() == []
