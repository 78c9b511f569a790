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
