"""The race tests can fail: an in-memory store without its lock loses them.

Each broken store below is the memory store with its lock taken away around
one read-decide-write, and a yield (``time.sleep(0)``) between the read and the
write so other threads run there, as they would between two statements of an
unlocked database transaction. The contract's race test is run against it, on
real threads, several times over; every run must fail. The same race tests
pass on the real memory stores (``tests/test_memory_stores.py``) and on the ORM.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from django.utils import timezone

from agent_persistence.exceptions import Busy
from agent_persistence.scope import Scope
from agent_persistence.stores.base import lookup_id, parse_id
from agent_persistence.stores.conversations import clean_conversation_changes, clean_version
from agent_persistence.stores.memory.conversations import MemoryConversationStore
from agent_persistence.stores.memory.supervision import MemorySupervisionStore
from agent_persistence.stores.memory.tickets import MemoryTicketStore
from agent_persistence.stores.rules.tickets import opens, target_of
from agent_persistence.stores.supervision import RUNNING, is_dead, occupant_of
from agent_persistence.testing.conversations import ConversationStoreContract
from agent_persistence.testing.family import Stores, memory_stores
from agent_persistence.testing.supervision import SupervisionStoreContract
from agent_persistence.testing.tickets import TicketStoreContract

ATTEMPTS = 3


class UnlockedConversationStore(MemoryConversationStore):
    """``update_if`` reads the version, yields, then writes: two writers can both see version 0."""

    def update_if(self, scope: Scope, conversation_id: Any, version: Any, **changes: Any) -> Any:
        pk = lookup_id(conversation_id)
        version = clean_version(version)
        cleaned = clean_conversation_changes(**changes)
        conversation = self.db.writable_conversation(scope, pk)
        if conversation.version != version:
            return None
        time.sleep(0)
        self._write(conversation, cleaned)
        return self.get(scope, pk)


class UnlockedSupervisionStore(MemorySupervisionStore):
    """``claim`` reads the row, yields, then takes it: two claimers can both find it free."""

    def claim(self, scope: Scope, conversation_id: Any, *, message_id: Any, run_id: Any = None, **kwargs: Any) -> Any:
        now = timezone.now()
        pk = lookup_id(conversation_id)
        self.db.writable_conversation(scope, pk)
        row = self.db.supervision.get(pk)
        if row is not None and row.status == RUNNING and not is_dead(row, now):
            raise Busy(occupant=occupant_of(row, now))
        time.sleep(0)
        values = {
            "status": RUNNING,
            "message_id": parse_id(message_id, "message_id"),
            "run_id": run_id,
            "replica": "",
            "heartbeat_at": now,
            "claimed_at": now,
        }
        return self._take(pk, row, values, now)


class UnlockedTicketStore(MemoryTicketStore):
    """``redeem`` reads the ticket unspent, yields, then spends it: two sockets can both be admitted."""

    def redeem(self, ticket_id: Any, conversation_id: Any = None, *, now: Any = None) -> Any:
        now = now or timezone.now()
        ticket = self.db.tickets.get(target_of(ticket_id))
        if ticket is None or ticket.spent_at is not None or ticket.expires_at <= now:
            return None
        if not opens(ticket.conversation_id, target_of(conversation_id)):
            return None
        time.sleep(0.001)
        ticket.spent_at = now
        return ticket


def broken_family(**stores: Any) -> Stores:
    family = memory_stores()
    for name, store_class in stores.items():
        setattr(family, name, store_class(getattr(family, name).db))
    return family


def contract_with(contract_class: type, family: Stores) -> Any:
    contract = contract_class()
    contract.family = family
    return contract


@pytest.mark.parametrize("attempt", range(ATTEMPTS))
def test_an_unlocked_update_if_loses_the_twenty_writers_race(attempt: int) -> None:
    contract = contract_with(ConversationStoreContract, broken_family(conversations=UnlockedConversationStore))
    with pytest.raises(AssertionError, match="winners"):
        contract.test_of_twenty_writers_at_one_version_exactly_one_wins(contract.family.conversations)


@pytest.mark.parametrize("attempt", range(ATTEMPTS))
def test_an_unlocked_claim_loses_the_twenty_claims_race(attempt: int) -> None:
    contract = contract_with(SupervisionStoreContract, broken_family(supervision=UnlockedSupervisionStore))
    with pytest.raises(AssertionError):
        contract.test_of_twenty_concurrent_claims_exactly_one_wins_every_round(contract.family.supervision)


@pytest.mark.parametrize("attempt", range(ATTEMPTS))
def test_an_unlocked_redeem_admits_both_of_two_sockets(attempt: int) -> None:
    contract = contract_with(TicketStoreContract, broken_family(tickets=UnlockedTicketStore))
    with pytest.raises(AssertionError):
        contract.test_two_threads_redeeming_one_ticket_at_once_admit_exactly_one(contract.family.tickets)


def test_the_same_races_pass_on_the_locked_memory_stores() -> None:
    """The control: the real memory stores, same harness, win every round."""
    family = memory_stores()
    contract_with(ConversationStoreContract, family).test_of_twenty_writers_at_one_version_exactly_one_wins(
        family.conversations
    )
    contract_with(SupervisionStoreContract, family).test_of_twenty_concurrent_claims_exactly_one_wins_every_round(
        family.supervision
    )
    contract_with(TicketStoreContract, family).test_two_threads_redeeming_one_ticket_at_once_admit_exactly_one(family.tickets)
