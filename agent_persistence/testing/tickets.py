"""The contract of a websocket ticket store, as a pytest class a custom backend can subclass.

::

    from agent_persistence.testing.tickets import TicketStoreContract

    class TestMyTicketStore(TicketStoreContract):
        def make_store(self):
            return MyTicketStore()

Time is passed explicitly (``now=``) so expiry and the per-minute cap are
exact and tests never sleep. The race tests redeem one ticket from real
threads and forked processes (threads for a family one process holds), so the
database must take concurrent transactions (PostgreSQL, or SQLite on a file in
WAL mode with IMMEDIATE transactions).
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.utils import timezone

from ..exceptions import TooManyRequests, Validation
from ..scope import Scope
from .actors import ALICE, BOB, MALLORY
from .concurrency import run_in_threads
from .events import assert_no_errors
from .family import FamilyContract

TTL = 60.0


class TicketStoreContract(FamilyContract):
    """Every rule of the ticket store; subclass and override :meth:`make_stores` or :meth:`make_store`."""

    def make_store(self) -> Any:
        return self.family.tickets

    @pytest.fixture
    def store(self, stores: Any) -> Any:
        return self.make_store()

    @pytest.fixture
    def now(self) -> datetime:
        return timezone.now()

    # -- issue -------------------------------------------------------------------------------

    def test_a_ticket_holds_its_scope_account_conversation_and_expiry(self, store: Any, now: datetime) -> None:
        conversation_id = uuid.uuid4()
        ticket = store.issue(ALICE, conversation_id=conversation_id, account="42", ttl=TTL, now=now)
        assert isinstance(ticket.pk, uuid.UUID)
        assert (ticket.tenant, ticket.user, ticket.account) == (ALICE.tenant, ALICE.user, "42")
        assert ticket.conversation_id == conversation_id
        assert (ticket.created_at, ticket.expires_at, ticket.spent_at) == (now, now + timedelta(seconds=TTL), None)

    def test_an_unbound_ticket_has_no_conversation_and_every_ticket_its_own_id(self, store: Any, now: datetime) -> None:
        first, second = (store.issue(ALICE, ttl=TTL, now=now) for _ in range(2))
        assert first.conversation_id is None and first.account == ""
        assert first.pk != second.pk

    def test_a_scope_the_columns_cannot_hold_is_validation(self, store: Any) -> None:
        with pytest.raises(Validation) as caught:
            store.issue(Scope(tenant="acme", user="x" * 10_000), ttl=TTL)
        assert caught.value.code == "invalid_scope"

    # -- the per-minute cap ------------------------------------------------------------------

    def test_the_ticket_past_the_cap_is_too_many_requests_until_the_oldest_leaves_the_minute(self, store: Any, now: datetime) -> None:
        for second in range(3):
            store.issue(ALICE, ttl=TTL, per_minute=3, now=now + timedelta(seconds=second))
        with pytest.raises(TooManyRequests) as caught:
            store.issue(ALICE, ttl=TTL, per_minute=3, now=now + timedelta(seconds=10))
        assert caught.value.code == "too_many_tickets"
        assert caught.value.retry_after == pytest.approx(50.0)  # the oldest (at +0 s) leaves the minute at +60 s
        assert store.issue(ALICE, ttl=TTL, per_minute=3, now=now + timedelta(seconds=60, milliseconds=1)).pk

    def test_the_cap_counts_each_scope_apart_and_none_is_no_cap(self, store: Any, now: datetime) -> None:
        store.issue(ALICE, ttl=TTL, per_minute=1, now=now)
        for other in (BOB, MALLORY):  # another user of the tenant; alice's user id in another tenant
            assert store.issue(other, ttl=TTL, per_minute=1, now=now).user == other.user
        for _ in range(5):
            store.issue(ALICE, ttl=TTL, per_minute=None, now=now)
        with pytest.raises(TooManyRequests):
            store.issue(ALICE, ttl=TTL, per_minute=6, now=now)

    # -- redeem ------------------------------------------------------------------------------

    def test_a_redeemed_ticket_is_the_issued_one_spent_and_single_use(self, store: Any, now: datetime) -> None:
        issued = store.issue(BOB, account="7", ttl=TTL, now=now)
        spent = store.redeem(issued.pk, uuid.uuid4(), now=now + timedelta(seconds=1))
        assert (spent.pk, spent.tenant, spent.user, spent.account) == (issued.pk, BOB.tenant, BOB.user, "7")
        assert spent.spent_at == now + timedelta(seconds=1)
        assert store.redeem(issued.pk, uuid.uuid4(), now=now + timedelta(seconds=2)) is None

    def test_a_ticket_is_refused_from_its_expiry_on(self, store: Any, now: datetime) -> None:
        issued = store.issue(ALICE, ttl=TTL, now=now)
        assert store.redeem(issued.pk, None, now=issued.expires_at) is None
        assert store.redeem(issued.pk, None, now=issued.expires_at - timedelta(microseconds=1)) is not None

    def test_a_bound_ticket_opens_its_conversation_only_and_a_refusal_spends_nothing(self, store: Any, now: datetime) -> None:
        mine = uuid.uuid4()
        issued = store.issue(ALICE, conversation_id=mine, ttl=TTL, now=now)
        for elsewhere in (uuid.uuid4(), None, "not a uuid", str(uuid.uuid4())):
            assert store.redeem(issued.pk, elsewhere, now=now) is None, elsewhere
        assert store.redeem(issued.pk, str(mine), now=now).conversation_id == mine  # its text form names it too

    def test_an_unbound_ticket_opens_any_conversation(self, store: Any, now: datetime) -> None:
        for target in (uuid.uuid4(), None, "not a uuid"):
            assert store.redeem(store.issue(ALICE, ttl=TTL, now=now).pk, target, now=now) is not None, target

    def test_an_unknown_or_malformed_ticket_id_is_refused(self, store: Any, now: datetime) -> None:
        store.issue(ALICE, ttl=TTL, now=now)
        for ticket_id in (uuid.uuid4(), "nonsense", None, "\x00"):
            assert store.redeem(ticket_id, None, now=now) is None, ticket_id

    def test_the_real_clock_is_the_default(self, store: Any) -> None:
        issued = store.issue(ALICE, ttl=TTL)
        assert issued.created_at <= timezone.now() < issued.expires_at
        assert store.redeem(issued.pk).spent_at is not None

    # -- purge -------------------------------------------------------------------------------

    def test_purge_deletes_the_expired_earliest_first_up_to_the_limit(self, store: Any, now: datetime) -> None:
        expired = [store.issue(ALICE, ttl=ttl, now=now - timedelta(hours=1)) for ttl in (30.0, 10.0, 20.0)]
        spent_live = store.issue(ALICE, ttl=TTL, now=now)
        store.redeem(spent_live.pk, None, now=now)
        live = store.issue(ALICE, ttl=TTL, now=now)
        assert store.purge_expired(before=now, limit=2) == 2
        # The two earliest expiries went: only the one of ttl 30 s can still be spent (as of an hour ago).
        earlier = now - timedelta(hours=1) + timedelta(seconds=1)
        assert [store.redeem(ticket.pk, None, now=earlier) is not None for ticket in expired] == [True, False, False]
        assert store.purge_expired(before=now, limit=10) == 1
        assert store.purge_expired(before=now, limit=10) == 0
        assert store.redeem(live.pk, None, now=now) is not None  # the live ticket stayed; so did the spent live one
        assert store.purge_expired(before=now + timedelta(seconds=TTL + 1), limit=10) == 2

    # -- async twins -------------------------------------------------------------------------

    def test_the_async_twins_run_the_sync_methods(self, store: Any, now: datetime) -> None:
        issued = async_to_sync(store.aissue)(ALICE, ttl=TTL, now=now)
        assert async_to_sync(store.aredeem)(issued.pk, None, now=now).pk == issued.pk
        assert async_to_sync(store.apurge_expired)(before=now + timedelta(seconds=TTL + 1), limit=10) == 1

    # -- races -------------------------------------------------------------------------------

    @pytest.mark.django_db(transaction=True)
    def test_two_threads_redeeming_one_ticket_at_once_admit_exactly_one(self, store: Any) -> None:
        """Two threads present the same ticket at the same instant, over ten rounds: one gets it, the other None."""
        for _ in range(10):
            issued = store.issue(ALICE, ttl=TTL)
            results = run_in_threads(2, lambda worker, ticket=issued: store.redeem(ticket.pk, None))
            assert_no_errors(results)
            assert sorted(result is not None for result in results) == [False, True]
            assert [result.pk for result in results if result is not None] == [issued.pk]

    @pytest.mark.django_db(transaction=True)
    def test_eight_threads_redeeming_one_ticket_at_once_admit_exactly_one(self, store: Any) -> None:
        issued = store.issue(ALICE, ttl=TTL)
        results = run_in_threads(8, lambda worker: store.redeem(issued.pk, None))
        assert_no_errors(results)
        assert sum(result is not None for result in results) == 1

    @pytest.mark.django_db(transaction=True)
    def test_processes_redeeming_one_ticket_at_once_admit_exactly_one(self, store: Any) -> None:
        """Four OS processes (threads for a family one process holds) present the same ticket: one gets it."""
        issued = store.issue(ALICE, ttl=TTL)
        results = self.family.run_in_processes(4, lambda worker: store.redeem(issued.pk, None) is not None)
        assert_no_errors(results)
        assert sorted(results) == [False, False, False, True]
