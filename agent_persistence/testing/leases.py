"""The contract of a lease store, as a pytest class a custom backend can subclass.

::

    from agent_persistence.testing.leases import LeaseStoreContract

    class TestMyLeaseStore(LeaseStoreContract):
        def make_store(self):
            return MyLeaseStore()

Time is passed explicitly (``now=``) so expiry is exact and tests never sleep.
The race tests use real threads and forked processes, so the database must
take concurrent transactions (PostgreSQL, or SQLite on a file in WAL mode with
IMMEDIATE transactions).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.utils import timezone

from ..exceptions import Validation
from ..models import Lease
from ..stores.base import Page
from ..stores.leases import LeaseResult
from .concurrency import run_in_threads
from .events import assert_no_errors
from .family import FamilyContract

TENANT = "acme"
OTHER_TENANT = "other"
#: Earlier than any lease a test writes: every stored lease reads as live at this moment.
DAWN = datetime(2000, 1, 1, tzinfo=dt_timezone.utc)


def keys(leases: list[Lease] | Page[Lease]) -> list[str]:
    items = leases.items if isinstance(leases, Page) else leases
    return [lease.key for lease in items]


class LeaseStoreContract(FamilyContract):
    """Every rule of the lease store; subclass and override :meth:`make_stores` or :meth:`make_store`."""

    def make_store(self) -> Any:
        return self.family.leases

    @pytest.fixture
    def store(self, stores: Any) -> Any:
        return self.make_store()

    def stored(self, key: str, tenant: str = TENANT) -> Lease | None:
        """The lease on ``key`` whether live or expired: read as of a moment before any lease was written."""
        leases = self.family.leases.get(tenant, [key], now=DAWN)
        return leases[0] if leases else None

    @pytest.fixture
    def now(self) -> datetime:
        return timezone.now().replace(microsecond=123456)

    def later(self, now: datetime, seconds: float) -> datetime:
        return now + timedelta(seconds=seconds)

    # -- acquire -----------------------------------------------------------------------------

    @pytest.mark.django_db
    def test_a_free_key_is_acquired(self, store: Any, now: datetime) -> None:
        result = store.acquire(TENANT, "job:1", "worker-a", ttl=30, metadata={"pid": 7}, now=now)
        assert isinstance(result, LeaseResult)
        assert (result.acquired, result.taken_over, result.previous_holder) == (True, False, None)
        lease = result.lease
        assert (lease.tenant, lease.key, lease.holder) == (TENANT, "job:1", "worker-a")
        assert (lease.acquired_at, lease.expires_at) == (now, self.later(now, 30))
        assert (lease.cancel_requested, lease.metadata) == (False, {"pid": 7})
        stored = self.stored("job:1")
        assert (stored.holder, stored.expires_at, stored.metadata) == ("worker-a", self.later(now, 30), {"pid": 7})

    @pytest.mark.django_db
    def test_metadata_defaults_to_an_empty_object(self, store: Any, now: datetime) -> None:
        assert store.acquire(TENANT, "k", "a", ttl=1, now=now).lease.metadata == {}

    @pytest.mark.django_db
    def test_a_live_lease_of_another_is_not_acquired_and_names_its_holder(self, store: Any, now: datetime) -> None:
        store.acquire(TENANT, "job", "worker-a", ttl=30, metadata={"pid": 1}, now=now)
        result = store.acquire(TENANT, "job", "worker-b", ttl=60, metadata={"pid": 2}, now=self.later(now, 29.999))
        assert (result.acquired, result.taken_over) == (False, False)
        assert (result.lease.holder, result.lease.expires_at, result.lease.metadata) == (
            "worker-a",
            self.later(now, 30),
            {"pid": 1},
        )
        assert self.stored("job").holder == "worker-a"

    @pytest.mark.django_db
    def test_acquiring_my_live_lease_extends_it(self, store: Any, now: datetime) -> None:
        store.acquire(TENANT, "job", "worker-a", ttl=30, metadata={"v": 1}, now=now)
        assert store.mark_cancel(TENANT, "job", now=now)
        again = store.acquire(TENANT, "job", "worker-a", ttl=30, now=self.later(now, 10))
        assert (again.acquired, again.taken_over, again.previous_holder) == (True, False, None)
        assert again.lease.expires_at == self.later(now, 40)
        # Same lease, still the same grant: its start, metadata and pending cancel stay.
        assert (again.lease.acquired_at, again.lease.metadata, again.lease.cancel_requested) == (now, {"v": 1}, True)
        replaced = store.acquire(TENANT, "job", "worker-a", ttl=5, metadata={"v": 2}, now=self.later(now, 20))
        assert (replaced.lease.expires_at, replaced.lease.metadata) == (self.later(now, 25), {"v": 2})

    @pytest.mark.django_db
    def test_an_expired_lease_of_another_is_taken_over(self, store: Any, now: datetime) -> None:
        store.acquire(TENANT, "job", "worker-a", ttl=30, metadata={"old": True}, now=now)
        store.mark_cancel(TENANT, "job", now=now)
        expiry = self.later(now, 30)
        result = store.acquire(TENANT, "job", "worker-b", ttl=10, now=expiry)
        assert (result.acquired, result.taken_over, result.previous_holder) == (True, True, "worker-a")
        lease = result.lease
        assert (lease.holder, lease.acquired_at, lease.expires_at) == ("worker-b", expiry, self.later(expiry, 10))
        assert (lease.cancel_requested, lease.metadata) == (False, {})
        assert len(store.get(TENANT, ["job"], now=DAWN)) == 1

    @pytest.mark.django_db
    def test_my_own_expired_lease_is_reacquired_as_a_takeover(self, store: Any, now: datetime) -> None:
        """A lapsed lease means the work under it may be unfinished, even if the same holder returns."""
        store.acquire(TENANT, "job", "worker-a", ttl=30, now=now)
        store.mark_cancel(TENANT, "job", now=now)
        result = store.acquire(TENANT, "job", "worker-a", ttl=30, now=self.later(now, 31))
        assert (result.acquired, result.taken_over, result.previous_holder) == (True, True, "worker-a")
        assert (result.lease.acquired_at, result.lease.cancel_requested) == (self.later(now, 31), False)

    @pytest.mark.django_db
    def test_a_lease_expires_exactly_at_its_expiry(self, store: Any, now: datetime) -> None:
        store.acquire(TENANT, "job", "worker-a", ttl=1, now=now)
        just_before, at_expiry = self.later(now, 0.999999), self.later(now, 1)
        assert not store.acquire(TENANT, "job", "worker-b", ttl=1, now=just_before).acquired
        assert store.renew(TENANT, "job", "worker-a", ttl=1, now=at_expiry) is None
        assert store.acquire(TENANT, "job", "worker-b", ttl=1, now=at_expiry).taken_over

    @pytest.mark.django_db
    def test_now_defaults_to_the_current_time(self, store: Any) -> None:
        before = timezone.now()
        lease = store.acquire(TENANT, "job", "worker-a", ttl=60).lease
        after = timezone.now()
        assert before <= lease.acquired_at <= after
        assert self.later(before, 60) <= lease.expires_at <= self.later(after, 60)
        assert keys(store.get(TENANT, ["job"])) == ["job"]
        assert store.renew(TENANT, "job", "worker-a", ttl=60) is not None

    # -- renew -------------------------------------------------------------------------------

    @pytest.mark.django_db
    def test_the_holder_renews_a_live_lease(self, store: Any, now: datetime) -> None:
        store.acquire(TENANT, "job", "worker-a", ttl=30, metadata={"m": 1}, now=now)
        renewed = store.renew(TENANT, "job", "worker-a", ttl=30, now=self.later(now, 20))
        assert isinstance(renewed, Lease)
        assert (renewed.holder, renewed.expires_at, renewed.acquired_at) == ("worker-a", self.later(now, 50), now)
        assert (renewed.cancel_requested, renewed.metadata) == (False, {"m": 1})
        assert self.stored("job").expires_at == self.later(now, 50)

    @pytest.mark.django_db
    def test_renew_is_refused_once_expired(self, store: Any, now: datetime) -> None:
        store.acquire(TENANT, "job", "worker-a", ttl=30, now=now)
        assert store.renew(TENANT, "job", "worker-a", ttl=30, now=self.later(now, 31)) is None
        assert self.stored("job").expires_at == self.later(now, 30)

    @pytest.mark.django_db
    def test_renew_by_another_or_of_an_absent_key_is_refused(self, store: Any, now: datetime) -> None:
        store.acquire(TENANT, "job", "worker-a", ttl=30, now=now)
        assert store.renew(TENANT, "job", "worker-b", ttl=300, now=now) is None
        assert store.renew(TENANT, "nothing", "worker-a", ttl=30, now=now) is None
        assert self.stored("job").expires_at == self.later(now, 30)

    @pytest.mark.django_db
    def test_a_taken_over_holder_can_no_longer_renew(self, store: Any, now: datetime) -> None:
        store.acquire(TENANT, "job", "worker-a", ttl=10, now=now)
        store.acquire(TENANT, "job", "worker-b", ttl=30, now=self.later(now, 11))
        assert store.renew(TENANT, "job", "worker-a", ttl=30, now=self.later(now, 12)) is None
        assert store.renew(TENANT, "job", "worker-b", ttl=30, now=self.later(now, 12)).holder == "worker-b"

    # -- cancel ------------------------------------------------------------------------------

    @pytest.mark.django_db
    def test_the_holder_sees_a_cancel_on_renew(self, store: Any, now: datetime) -> None:
        store.acquire(TENANT, "job", "worker-a", ttl=30, now=now)
        assert store.renew(TENANT, "job", "worker-a", ttl=30, now=now).cancel_requested is False
        assert store.mark_cancel(TENANT, "job", now=self.later(now, 1)) is True
        assert store.mark_cancel(TENANT, "job", now=self.later(now, 1)) is True
        assert store.renew(TENANT, "job", "worker-a", ttl=30, now=self.later(now, 2)).cancel_requested is True

    @pytest.mark.django_db
    def test_mark_cancel_of_an_absent_or_expired_lease_is_false(self, store: Any, now: datetime) -> None:
        assert store.mark_cancel(TENANT, "nothing", now=now) is False
        store.acquire(TENANT, "job", "worker-a", ttl=30, now=now)
        assert store.mark_cancel(TENANT, "job", now=self.later(now, 30)) is False
        assert self.stored("job").cancel_requested is False

    # -- release -----------------------------------------------------------------------------

    @pytest.mark.django_db
    def test_the_holder_releases_and_the_key_is_free_again(self, store: Any, now: datetime) -> None:
        store.acquire(TENANT, "job", "worker-a", ttl=30, now=now)
        assert store.release(TENANT, "job", "worker-a") is True
        assert self.stored("job") is None
        assert store.release(TENANT, "job", "worker-a") is False
        result = store.acquire(TENANT, "job", "worker-b", ttl=30, now=now)
        assert (result.acquired, result.taken_over) == (True, False)

    @pytest.mark.django_db
    def test_release_by_another_is_refused(self, store: Any, now: datetime) -> None:
        store.acquire(TENANT, "job", "worker-a", ttl=30, now=now)
        assert store.release(TENANT, "job", "worker-b") is False
        assert store.release(TENANT, "nothing", "worker-a") is False
        assert self.stored("job").holder == "worker-a"

    @pytest.mark.django_db
    def test_the_holder_may_release_its_expired_lease_until_taken_over(self, store: Any, now: datetime) -> None:
        store.acquire(TENANT, "expired", "worker-a", ttl=1, now=now)
        store.acquire(TENANT, "taken", "worker-a", ttl=1, now=now)
        store.acquire(TENANT, "taken", "worker-b", ttl=30, now=self.later(now, 2))
        assert store.release(TENANT, "expired", "worker-a") is True
        assert store.release(TENANT, "taken", "worker-a") is False
        assert self.stored("taken").holder == "worker-b"

    # -- get and lists -----------------------------------------------------------------------

    @pytest.mark.django_db
    def test_get_returns_the_live_leases_among_keys(self, store: Any, now: datetime) -> None:
        store.acquire(TENANT, "b", "worker", ttl=30, now=now)
        store.acquire(TENANT, "a", "worker", ttl=30, now=now)
        store.acquire(TENANT, "expired", "worker", ttl=1, now=now)
        store.acquire(OTHER_TENANT, "c", "worker", ttl=30, now=now)
        found = store.get(TENANT, ["b", "a", "expired", "absent", "c"], now=self.later(now, 5))
        assert keys(found) == ["a", "b"]
        assert all(isinstance(lease, Lease) for lease in found)
        assert store.get(TENANT, [], now=now) == []

    @pytest.mark.django_db
    def test_list_live_filters_by_prefix_in_key_order(self, store: Any, now: datetime) -> None:
        for key in ["run:2", "run:1", "run:10", "other:1", "runner"]:
            store.acquire(TENANT, key, "worker", ttl=30, now=now)
        store.acquire(TENANT, "run:expired", "worker", ttl=1, now=now)
        store.acquire(OTHER_TENANT, "run:3", "worker", ttl=30, now=now)
        at = self.later(now, 5)
        page = store.list_live(TENANT, "run:", now=at)
        assert isinstance(page, Page)
        assert keys(page) == ["run:1", "run:10", "run:2"]
        assert (page.total, page.has_more) == (3, False)
        assert keys(store.list_live(TENANT, now=at)) == ["other:1", "run:1", "run:10", "run:2", "runner"]
        assert keys(store.list_live(TENANT, "run", now=at)) == ["run:1", "run:10", "run:2", "runner"]
        first = store.list_live(TENANT, "run:", now=at, limit=2)
        assert (keys(first), first.total, first.has_more) == (["run:1", "run:10"], 3, True)
        assert keys(store.list_live(TENANT, "run:", now=at, limit=2, offset=2)) == ["run:2"]

    @pytest.mark.django_db
    def test_list_expired_puts_the_longest_expired_first(self, store: Any, now: datetime) -> None:
        store.acquire(TENANT, "job:late", "worker", ttl=3, now=now)
        store.acquire(TENANT, "job:early", "worker", ttl=1, now=now)
        store.acquire(TENANT, "job:middle", "worker", ttl=2, now=now)
        store.acquire(TENANT, "job:live", "worker", ttl=30, now=now)
        store.acquire(TENANT, "other:early", "worker", ttl=1, now=now)
        store.acquire(OTHER_TENANT, "job:x", "worker", ttl=1, now=now)
        at = self.later(now, 10)
        assert keys(store.list_expired(TENANT, "job:", now=at)) == ["job:early", "job:middle", "job:late"]
        assert keys(store.list_expired(TENANT, now=at)) == ["job:early", "other:early", "job:middle", "job:late"]
        assert keys(store.list_expired(TENANT, "job:", now=at, limit=1)) == ["job:early"]
        assert keys(store.list_expired(TENANT, "job:", now=self.later(now, 1.5))) == ["job:early"]
        assert keys(store.list_live(TENANT, "job:", now=at)) == ["job:live"]

    @pytest.mark.django_db
    def test_prefix_wildcards_and_case_are_literal(self, store: Any, now: datetime) -> None:
        for key in ["a_1", "ab1", "a%1", "aX1", "A_1", "a\\1"]:
            store.acquire(TENANT, key, "worker", ttl=30, now=now)
        assert keys(store.list_live(TENANT, "a_", now=now)) == ["a_1"]
        assert keys(store.list_live(TENANT, "a%", now=now)) == ["a%1"]
        assert keys(store.list_live(TENANT, "a\\", now=now)) == ["a\\1"]
        assert keys(store.list_live(TENANT, "A", now=now)) == ["A_1"]
        assert keys(store.list_expired(TENANT, "a_", now=self.later(now, 60))) == ["a_1"]

    # -- tenants -----------------------------------------------------------------------------

    @pytest.mark.django_db
    def test_the_same_key_in_another_tenant_is_independent(self, store: Any, now: datetime) -> None:
        assert store.acquire(TENANT, "job", "worker-a", ttl=30, now=now).acquired
        theirs = store.acquire(OTHER_TENANT, "job", "worker-b", ttl=30, now=now)
        assert (theirs.acquired, theirs.taken_over, theirs.lease.tenant) == (True, False, OTHER_TENANT)
        assert store.renew(OTHER_TENANT, "job", "worker-a", ttl=30, now=now) is None
        assert store.release(OTHER_TENANT, "job", "worker-a") is False
        assert store.mark_cancel(OTHER_TENANT, "job", now=now)
        assert store.renew(TENANT, "job", "worker-a", ttl=30, now=now).cancel_requested is False
        assert store.release(TENANT, "job", "worker-a")
        assert keys(store.get(OTHER_TENANT, ["job"], now=now)) == ["job"]
        assert store.get(TENANT, ["job"], now=now) == []

    # -- validation --------------------------------------------------------------------------

    @pytest.mark.django_db
    @pytest.mark.parametrize(
        "arguments",
        [
            {"key": ""},
            {"key": "k" * 256},
            {"key": None},
            {"key": 5},
            {"key": "nul\x00"},
            {"holder": ""},
            {"holder": "h" * 256},
            {"holder": None},
            {"holder": "nul\x00"},
            {"tenant": None},
            {"tenant": 1},
            {"tenant": "t" * 256},
            {"tenant": "nul\x00"},
            {"ttl": 0},
            {"ttl": -1},
            {"ttl": float("nan")},
            {"ttl": float("inf")},
            {"ttl": "30"},
            {"ttl": None},
            {"ttl": True},
            {"ttl": 10**30},
            {"now": datetime(2030, 1, 1)},
            {"now": "soon"},
            {"metadata": []},
            {"metadata": {"nul": "\x00"}},
        ],
    )
    def test_bad_acquire_arguments_are_validation_and_write_nothing(
        self, store: Any, now: datetime, arguments: dict[str, Any]
    ) -> None:
        call = {"tenant": TENANT, "key": "job", "holder": "worker", "ttl": 30, "now": now, **arguments}
        with pytest.raises(Validation):
            store.acquire(call.pop("tenant"), call.pop("key"), call.pop("holder"), **call)
        assert store.list_live(TENANT, now=DAWN).total == store.list_live(OTHER_TENANT, now=DAWN).total == 0

    @pytest.mark.django_db
    def test_longest_names_are_accepted(self, store: Any, now: datetime) -> None:
        lease = store.acquire("t" * 255, "k" * 255, "h" * 255, ttl=0.001, now=now).lease
        assert (len(lease.tenant), len(lease.key), len(lease.holder)) == (255, 255, 255)

    @pytest.mark.django_db
    def test_bad_arguments_to_the_other_methods_are_validation(self, store: Any, now: datetime) -> None:
        store.acquire(TENANT, "job", "worker", ttl=30, now=now)
        calls = [
            lambda: store.renew(TENANT, "job", "worker", ttl=0, now=now),
            lambda: store.renew(TENANT, "job", "worker", ttl=float("inf"), now=now),
            lambda: store.renew(TENANT, "", "worker", ttl=1, now=now),
            lambda: store.renew(TENANT, "job", "", ttl=1, now=now),
            lambda: store.release(TENANT, "job", ""),
            lambda: store.release(TENANT, "k" * 256, "worker"),
            lambda: store.mark_cancel(TENANT, "", now=now),
            lambda: store.mark_cancel(TENANT, "job", now=datetime(2030, 1, 1)),
            lambda: store.get(TENANT, "job", now=now),
            lambda: store.get(TENANT, ["job", ""], now=now),
            lambda: store.get(TENANT, ["nul\x00"], now=now),
            lambda: store.list_live(TENANT, None, now=now),
            lambda: store.list_live(TENANT, "nul\x00", now=now),
            lambda: store.list_live(TENANT, "", now=now, limit=0),
            lambda: store.list_expired(TENANT, "", now=now, limit=10**9),
            lambda: store.list_expired(TENANT, "", now=now, offset=-1),
            lambda: store.list_expired(None, "", now=now),
        ]
        for index, call in enumerate(calls):
            with pytest.raises(Validation):
                call()
                pytest.fail(f"call #{index} was accepted")
        lease = self.stored("job")
        assert (lease.holder, lease.expires_at, lease.cancel_requested) == ("worker", self.later(now, 30), False)

    # -- async twins -------------------------------------------------------------------------

    @pytest.mark.django_db
    def test_async_twins_do_what_the_sync_methods_do(self, store: Any, now: datetime) -> None:
        assert async_to_sync(store.aacquire)(TENANT, "job", "worker", ttl=30, now=now).acquired
        assert async_to_sync(store.arenew)(TENANT, "job", "worker", ttl=30, now=now) is not None
        assert async_to_sync(store.amark_cancel)(TENANT, "job", now=now) is True
        assert keys(async_to_sync(store.aget)(TENANT, ["job"], now=now)) == ["job"]
        assert keys(async_to_sync(store.alist_live)(TENANT, "j", now=now)) == ["job"]
        assert keys(async_to_sync(store.alist_expired)(TENANT, "j", now=self.later(now, 31))) == ["job"]
        assert async_to_sync(store.arelease)(TENANT, "job", "worker") is True

    # -- races -------------------------------------------------------------------------------

    @pytest.mark.django_db(transaction=True)
    def test_threads_acquiring_one_free_key_at_once_make_exactly_one_holder(self, store: Any) -> None:
        """16 threads acquire the same free key at the same instant, over several rounds."""
        threads, rounds = 16, 5
        for round_number in range(rounds):
            key = f"race:free:{round_number}"
            results = run_in_threads(threads, lambda worker: store.acquire(TENANT, key, f"worker-{worker}", ttl=30))
            assert_no_errors(results)
            winners = [result.lease.holder for result in results if result.acquired]
            assert len(winners) == 1, winners
            assert not any(result.taken_over for result in results)
            assert {result.lease.holder for result in results} == {winners[0]}
            assert [self.stored(key).holder] == winners

    @pytest.mark.django_db(transaction=True)
    def test_threads_taking_over_one_expired_lease_at_once_make_exactly_one_holder(self, store: Any) -> None:
        """16 threads find the same lease expired; exactly one takes it over, over several rounds."""
        threads, rounds = 16, 5
        for round_number in range(rounds):
            key = f"race:expired:{round_number}"
            now = timezone.now()
            store.acquire(TENANT, key, "crashed", ttl=1, now=now - timedelta(seconds=60))
            results = run_in_threads(
                threads, lambda worker: store.acquire(TENANT, key, f"worker-{worker}", ttl=30, now=now)
            )
            assert_no_errors(results)
            winners = [result for result in results if result.acquired]
            assert len(winners) == 1, [result.lease.holder for result in winners]
            assert (winners[0].taken_over, winners[0].previous_holder) == (True, "crashed")
            assert {result.lease.holder for result in results} == {winners[0].lease.holder}
            assert self.stored(key).holder == winners[0].lease.holder

    @pytest.mark.django_db(transaction=True)
    def test_processes_contending_for_many_keys_make_one_holder_each(self, store: Any) -> None:
        """8 OS processes try the same 20 keys in turn; each key ends with exactly one holder."""
        processes, key_count = 8, 20

        def try_every_key(worker: int) -> list[str]:
            return [
                f"race:process:{index}"
                for index in range(key_count)
                if store.acquire(TENANT, f"race:process:{index}", f"process-{worker}", ttl=30).acquired
            ]

        results = self.family.run_in_processes(processes, try_every_key)
        assert_no_errors(results)
        won = sorted(key for worker_keys in results for key in worker_keys)
        assert won == sorted(f"race:process:{index}" for index in range(key_count))
        for worker, worker_keys in enumerate(results):
            held = [lease.holder for lease in store.get(TENANT, worker_keys, now=DAWN)]
            assert len(held) == len(worker_keys) and set(held) <= {f"process-{worker}"}
