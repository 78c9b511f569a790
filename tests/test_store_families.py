"""E011: the stores of the turn aggregate must come from one backend family."""

from __future__ import annotations

from typing import Any

from agent_persistence.checks import check_store_families, store_family
from agent_persistence.stores.conversations import ConversationStore
from agent_persistence.stores.turns import TurnStore


def ids(messages: list[Any]) -> list[str]:
    return [message.id for message in messages]


def test_the_shipped_orm_family_is_one_family() -> None:
    assert ids(check_store_families()) == []
    assert store_family(TurnStore) == store_family(ConversationStore) == "orm"


def test_swapping_one_fenced_store_alone_is_an_error(settings: Any) -> None:
    settings.AGENT_PERSISTENCE = {
        **settings.AGENT_PERSISTENCE,
        "SUPERVISION_STORE": "agent_persistence.stores.memory.supervision.MemorySupervisionStore",
    }
    messages = check_store_families()
    assert ids(messages) == ["agent_persistence.E011"]
    assert "SUPERVISION_STORE" in messages[0].msg and "memory" in messages[0].msg


class DeclaredStore(ConversationStore):
    family = "acme"


def test_a_store_declares_its_family(settings: Any) -> None:
    assert store_family(DeclaredStore) == "acme"
    settings.AGENT_PERSISTENCE = {**settings.AGENT_PERSISTENCE, "CONVERSATION_STORE": "tests.test_store_families.DeclaredStore"}
    assert ids(check_store_families()) == ["agent_persistence.E011"]


def test_websocket_settings_are_checked(settings: Any) -> None:
    from agent_persistence.checks import check_settings

    for key, value in [("WEBSOCKET_MAX_PER_USER", 0), ("WEBSOCKET_MAX_PER_USER", "10"), ("WEBSOCKET_IDLE_POLL_MAX", 0),
                       ("WEBSOCKET_ACCESS_CHECK_INTERVAL", -1), ("PRODUCER_LOCK_TIMEOUT", 0), ("SEAL_RETRY_FOR", True)]:
        settings.AGENT_PERSISTENCE = {**settings.AGENT_PERSISTENCE, key: value}
        assert "agent_persistence.E003" in ids(check_settings()), (key, value)
    settings.AGENT_PERSISTENCE = {**settings.AGENT_PERSISTENCE, "WEBSOCKET_MAX_PER_USER": None, "WEBSOCKET_IDLE_POLL_MAX": 5,
                                  "WEBSOCKET_ACCESS_CHECK_INTERVAL": 2, "PRODUCER_LOCK_TIMEOUT": 1, "SEAL_RETRY_FOR": 300}
    assert "agent_persistence.E003" not in ids(check_settings())


def test_the_activity_store_is_swapped_with_the_turn_family(settings: Any) -> None:
    """Its producer writes are fenced through the supervision rows of its own family."""
    settings.AGENT_PERSISTENCE = {
        **settings.AGENT_PERSISTENCE,
        "ACTIVITY_STORE": "agent_persistence.stores.memory.activities.MemoryActivityStore",
    }
    messages = check_store_families()
    assert ids(messages) == ["agent_persistence.E011"] and "ACTIVITY_STORE" in messages[0].msg
