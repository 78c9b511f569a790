"""One STORES setting names the store family; E011 refuses a bad one, and the deprecated per-store keys still work.

The turn aggregate's stores must come from one backend family: with the
deprecated per-store keys a project could still swap one alone, which E011
refuses too.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import pytest
from django.core.checks import run_checks
from django.test import override_settings

from agent_persistence import stores as accessors
from agent_persistence.checks import check_deprecated_store_keys, check_memory_stores, check_store_families, store_family
from agent_persistence.stores.conversations import ConversationStore
from agent_persistence.stores.family import SLOT_BY_SETTING, SLOTS, FamilyError, Stores, family_builder
from agent_persistence.stores.memory import MEMORY_STORES, reset_memory_stores
from agent_persistence.stores.memory.database import DEFAULT_DATABASE
from agent_persistence.stores.memory.family import stores as memory_family
from agent_persistence.stores.turns import TurnStore

MEMORY = "agent_persistence.stores.memory.family"
ACCESSORS = {
    "turns": accessors.turn_store, "conversations": accessors.conversation_store, "events": accessors.event_store,
    "runs": accessors.run_store, "interrupts": accessors.interrupt_store, "supervision": accessors.supervision_store,
    "recordings": accessors.recording_store, "checkpoints": accessors.checkpoint_store,
    "activities": accessors.activity_store, "artifacts": accessors.artifact_store,
    "generations": accessors.generation_run_store, "leases": accessors.lease_store, "files": accessors.file_store,
    "tasks": accessors.task_store, "blobs": accessors.blob_store, "metadata": accessors.metadata_store,
    "tickets": accessors.ticket_store,
}


def ids(messages: list[Any]) -> list[str]:
    return [message.id for message in messages]


def configured(settings: Any, **values: Any) -> None:
    settings.AGENT_PERSISTENCE = {**settings.AGENT_PERSISTENCE, **values}


def test_every_slot_has_an_accessor() -> None:
    assert set(ACCESSORS) == {slot.name for slot in SLOTS}


def test_the_shipped_orm_family_is_one_family() -> None:
    assert ids(check_store_families()) == []
    assert store_family(TurnStore) == store_family(ConversationStore) == "orm"
    for name, accessor in ACCESSORS.items():
        assert store_family(type(accessor())) == "orm", name


def test_stores_names_the_in_memory_family_for_every_accessor(settings: Any) -> None:
    configured(settings, STORES=MEMORY)
    try:
        assert ids(check_store_families()) == []
        for name, accessor in ACCESSORS.items():
            store = accessor()
            assert store_family(type(store)) == "memory", name
            assert store is accessor(), name  # one shared family instance
            if hasattr(store, "db"):
                assert store.db is DEFAULT_DATABASE, name
    finally:
        reset_memory_stores()


def test_the_in_memory_family_without_debug_is_warned_about_by_its_stores_key() -> None:
    with override_settings(DEBUG=False, AGENT_PERSISTENCE={"STORES": MEMORY}):
        (warning,) = check_memory_stores()
    assert warning.id == "agent_persistence.W002" and "STORES" in warning.msg


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("nowhere.family", "does not import"),
        ("agent_persistence.stores.orm", "defines no stores()"),
        ("tests.incomplete_family", "has no turns store"),
        (42, "import path of a store family module"),
    ],
)
def test_a_wrong_stores_value_is_e011(settings: Any, value: Any, says: str) -> None:
    configured(settings, STORES=value)
    (error,) = check_store_families()
    assert error.id == "agent_persistence.E011"
    assert "STORES" in error.msg and says in error.msg, error.msg
    assert "orm.family" in error.hint


def test_a_store_that_does_not_follow_its_protocol_is_named(settings: Any) -> None:
    configured(settings, STORES="tests.incomplete_family")
    (error,) = check_store_families()
    assert "its leases store (object) does not follow LeaseStoreProtocol" in error.msg


def test_a_family_builder_is_its_module_stores_function() -> None:
    from agent_persistence.stores.memory import family

    assert family_builder(MEMORY) is family.stores
    with pytest.raises(FamilyError):
        family_builder("agent_persistence.stores.orm")
    assert isinstance(family.stores(), Stores)


# -- the deprecated per-store keys ------------------------------------------------------------


def test_a_deprecated_key_still_chooses_its_store_with_a_deprecation_warning(settings: Any) -> None:
    configured(settings, LEASE_STORE=MEMORY_STORES["LEASE_STORE"])
    with pytest.warns(DeprecationWarning, match=r"AGENT_PERSISTENCE\['LEASE_STORE'\] is deprecated.*'STORES'"):
        store = accessors.lease_store()
    assert type(store).__name__ == "MemoryLeaseStore"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert accessors.lease_store() is store  # the shared instance: warned once
        assert store_family(type(accessors.conversation_store())) == "orm"  # the others: STORES's family


def test_the_deprecated_keys_are_a_check_warning_naming_stores(settings: Any) -> None:
    assert check_deprecated_store_keys() == []
    configured(settings, **MEMORY_STORES)
    (warning,) = check_deprecated_store_keys()
    assert warning.id == "agent_persistence.W004"
    assert "STORES" in warning.msg and "memory.family" in warning.hint
    for key in MEMORY_STORES:
        assert key in warning.msg
    assert ids(check_store_families()) == []  # the whole memory family, key by key, is one family


def test_swapping_one_fenced_store_alone_is_an_error(settings: Any) -> None:
    configured(settings, SUPERVISION_STORE="agent_persistence.stores.memory.supervision.MemorySupervisionStore")
    messages = check_store_families()
    assert ids(messages) == ["agent_persistence.E011"]
    assert "SUPERVISION_STORE" in messages[0].msg and "memory" in messages[0].msg


def test_a_deprecated_key_of_another_family_than_stores_is_an_error(settings: Any) -> None:
    configured(settings, STORES=MEMORY, TURN_STORE="agent_persistence.stores.turns.TurnStore")
    (error,) = check_store_families()
    assert error.id == "agent_persistence.E011" and "orm: TURN_STORE" in error.msg


class DeclaredStore(ConversationStore):
    family = "acme"


def test_a_store_declares_its_family(settings: Any) -> None:
    assert store_family(DeclaredStore) == "acme"
    configured(settings, CONVERSATION_STORE="tests.test_store_families.DeclaredStore")
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
    configured(settings, ACTIVITY_STORE="agent_persistence.stores.memory.activities.MemoryActivityStore")
    messages = check_store_families()
    assert ids(messages) == ["agent_persistence.E011"] and "ACTIVITY_STORE" in messages[0].msg


def test_the_shipped_test_settings_pass_every_store_check() -> None:
    assert [m.id for m in run_checks() if m.id in {"agent_persistence.E011", "agent_persistence.W004"}] == []


def test_a_family_written_before_the_ticket_slot_gets_the_orm_ticket_store(settings: Any) -> None:
    """A ``Stores`` that names no ``tickets`` passes E011, and its accessor serves the ORM ticket store, as before the slot."""
    from agent_persistence.stores.tickets import TicketStore

    configured(settings, STORES="tests.pre_ticket_family")
    assert ids(check_store_families()) == []
    assert type(accessors.ticket_store()) is TicketStore
    assert type(dataclasses.replace(memory_family(), tickets=None).tickets) is TicketStore


def test_the_ticket_slot_has_no_deprecated_key() -> None:
    """The ticket store became a slot after STORES: no ``TICKET_STORE`` key chooses it alone."""
    (slot,) = [slot for slot in SLOTS if slot.name == "tickets"]
    assert slot.setting is None and slot.alone
    assert "TICKET_STORE" not in SLOT_BY_SETTING
