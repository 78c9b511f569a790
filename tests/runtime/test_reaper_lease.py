"""The fleet-wide sweep lease: one sweep of dead turns at a time, across threads and processes.

Every rule runs on both store families (the ORM one on this run's database, SQLite or PostgreSQL,
and the in-memory one) through the real lease store, the real reaper (``reap_dead_turns``,
``reap_forever``) and ``manage.py reap_turns``. Dead turns are real: begun (message, run, claim)
and never driven, so they read dead once ``DEAD_AFTER`` has passed.

The race tests see the sweep bodies through the reaper's own debug lines ("Sweep of dead turns
started by ..." / "ended by ..."), written with the time to one file by every thread and process;
no two sweeps' intervals may overlap. Their controls run the same race with ``force=True`` (no
lease) and must see overlaps, so the race tests are known to be able to fail.
"""

from __future__ import annotations

import asyncio
import io
import logging
import os
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.conf import settings
from django.core.management import call_command
from django.db import connection, connections
from django.test import override_settings
from django.utils import timezone

from agent_persistence.exceptions import Validation
from agent_persistence.runtime import lifecycle
from agent_persistence.runtime.lifecycle import REAPER_LEASE_KEY, REAPER_LEASE_TENANT, SweepLease
from agent_persistence.runtime.producer import Supervisor
from agent_persistence.scope import Scope
from agent_persistence.stores import conversation_store, lease_store, supervision_store, turn_store
from agent_persistence.stores.memory import reset_memory_stores
from agent_persistence.testing.concurrency import run_in_processes, run_in_threads

pytestmark = [pytest.mark.timeout(240)]

ALICE = Scope(tenant="", user="alice")
DEAD_AFTER = 0.3
FAST = {"HEARTBEAT_INTERVAL": 0.1, "DEAD_AFTER": DEAD_AFTER, "REAPER_INTERVAL": 0.05, "REAPER_LEASE_TTL": 30.0}
LOGGER = logging.getLogger("agent_persistence.runtime.lifecycle")
#: Sweepers and rounds of the race tests: enough that without the lease their sweeps overlap on every run.
THREADS, PROCESSES, ROUNDS = 6, 4, 40


# -- what the tests observe --------------------------------------------------------------------


class SweepLog(logging.Handler):
    """Appends ``<ns> start|end <holder>`` for each sweep body's debug line, from any thread or forked process."""

    def __init__(self, path: Path) -> None:
        super().__init__(logging.DEBUG)
        self.path = path

    def emit(self, record: logging.LogRecord) -> None:
        message = record.msg if isinstance(record.msg, str) else ""
        if message.startswith("Sweep of dead turns started by "):
            kind = "start"
        elif message.startswith("Sweep of dead turns ended by "):
            kind = "end"
        else:
            return
        line = f"{time.time_ns()} {kind} {record.args[0]}\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line.encode())  # one write of O_APPEND: lines of several processes never interleave
        finally:
            os.close(fd)


@pytest.fixture
def sweep_log(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "sweeps.log"
    handler = SweepLog(path)
    level = LOGGER.level
    LOGGER.setLevel(logging.DEBUG)
    LOGGER.addHandler(handler)
    try:
        yield path
    finally:
        LOGGER.removeHandler(handler)
        LOGGER.setLevel(level)


def sweep_intervals(path: Path) -> list[tuple[int, int, str]]:
    """(start ns, end ns, holder) of every sweep body in the log, by start; every start has its end."""
    starts: dict[str, int] = {}
    intervals = []
    for line in path.read_text().splitlines() if path.exists() else []:
        stamp, kind, holder = line.split(" ", 2)
        if kind == "start":
            assert holder not in starts, f"two sweeps named {holder}"
            starts[holder] = int(stamp)
        else:
            intervals.append((starts.pop(holder), int(stamp), holder))
    assert not starts, f"sweeps that never ended: {starts}"
    return sorted(intervals)


def overlapping(intervals: list[tuple[int, int, str]]) -> list[tuple[str, str]]:
    """Pairs of sweeps whose bodies ran at the same time."""
    pairs = []
    latest_end, latest = -1, ""
    for start, end, holder in intervals:
        if start <= latest_end:
            pairs.append((latest, holder))
        if end > latest_end:
            latest_end, latest = end, holder
    return pairs


# -- what the tests set up ---------------------------------------------------------------------


def dead_turns(count: int) -> list[uuid.UUID]:
    """``count`` turns begun and never driven (no producer), once they read dead."""
    ids = []
    for _ in range(count):
        conversation_id = conversation_store().create(ALICE, agent="echo").pk
        lifecycle.begin_turn(ALICE, conversation_id, content="go")
        ids.append(conversation_id)
    deadline = time.monotonic() + 10
    while not set(ids) <= {pk for _, pk, _ in turn_store().dead_turns(limit=1000)}:
        assert time.monotonic() < deadline, "the begun turns never read dead"
        time.sleep(0.05)
    return ids


def running(conversation_id: uuid.UUID) -> bool:
    return supervision_store().read(conversation_id).status == "running"


def hold_sweep_lease(holder: str, *, ttl: float = 60.0, now: Any = None) -> None:
    """Another process's sweep holding the lease (``now`` in the past: a sweep that died long ago)."""
    assert lease_store().acquire(REAPER_LEASE_TENANT, REAPER_LEASE_KEY, holder, ttl=ttl, now=now).acquired


def sweep_lease_rows() -> list[Any]:
    """The sweep lease, live or lapsed (read as of long ago, when any stored lease was live)."""
    return lease_store().get(REAPER_LEASE_TENANT, [REAPER_LEASE_KEY], now=timezone.now() - timedelta(days=3650))


def sweep(**options: Any) -> list[uuid.UUID] | None:
    """One close-out sweep from this (sync) thread, its store calls on this thread's connection."""
    return async_to_sync(lifecycle.reap_dead_turns)(resume=False, **options)


def reap_turns(*args: str) -> str:
    out = io.StringIO()
    call_command("reap_turns", *args, stdout=out)
    return out.getvalue()


def sweep_rounds(worker: int, *, force: bool = False) -> tuple[int, int]:
    """``ROUNDS`` sweeps back to back: (swept, skipped)."""
    swept = skipped = 0
    for _ in range(ROUNDS):
        if sweep(force=force) is None:
            skipped += 1
        else:
            swept += 1
    return swept, skipped


def sweep_rounds_unleased(worker: int) -> tuple[int, int]:
    return sweep_rounds(worker, force=True)


async def until_reaped(conversation_ids: list[uuid.UUID], reaper: asyncio.Task[None]) -> None:
    deadline = time.monotonic() + 15
    while any([(await supervision_store().aread(pk)).status == "running" for pk in conversation_ids]):
        assert time.monotonic() < deadline, "the reaper never reaped the dead turns"
        assert not reaper.done(), "the reaper loop ended"
        await asyncio.sleep(0.05)


async def stop_reaper(reaper: asyncio.Task[None]) -> None:
    """Cancel the reaper, let the producers it started end, and close the loop's sync thread's connections."""
    reaper.cancel()
    await asyncio.gather(reaper, return_exceptions=True)
    producers = list(Supervisor.current().producers.values())
    await asyncio.gather(*(p.task for p in producers if p.task is not None), return_exceptions=True)
    await sync_to_async(connections.close_all)()


def totals(results: list[Any]) -> tuple[int, int]:
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return sum(swept for swept, _ in results), sum(skipped for _, skipped in results)


def assert_one_sweep_at_a_time(results: list[Any], sweep_log: Path) -> None:
    """No two sweep bodies overlapped; each sweep that did not skip ran one; and the sweepers did contend."""
    swept, skipped = totals(results)
    intervals = sweep_intervals(sweep_log)
    assert overlapping(intervals) == []
    assert len(intervals) == swept and swept + skipped == len(results) * ROUNDS
    assert swept > 0 and skipped > 0


def assert_sweeps_overlap(results: list[Any], sweep_log: Path) -> None:
    """The control: without the lease no sweep skips, and some bodies ran at the same time."""
    swept, skipped = totals(results)
    assert skipped == 0 and swept == len(results) * ROUNDS
    assert overlapping(sweep_intervals(sweep_log)) != []


# -- the rules, on both families ---------------------------------------------------------------


class SweepLeaseRules:
    """What the fleet-wide sweep lease guarantees, whichever family stores it."""

    def test_a_sweep_takes_the_lease_and_releases_it_after(self, sweep_log: Path) -> None:
        [conversation_id] = dead_turns(1)
        assert sweep() == [conversation_id]
        assert not running(conversation_id)
        [(_, _, holder)] = sweep_intervals(sweep_log)
        assert holder.startswith(f"{lifecycle.replica_id()}/")  # the replica id, then the sweep's token
        assert sweep_lease_rows() == []  # released: the next interval any process may sweep

    def test_a_held_lease_skips_the_sweep_and_touches_nothing(self, sweep_log: Path, caplog: pytest.LogCaptureFixture) -> None:
        [conversation_id] = dead_turns(1)
        hold_sweep_lease("web-2:811/0123456789ab")
        with caplog.at_level(logging.DEBUG, logger=LOGGER.name):
            lease = SweepLease()
            assert async_to_sync(lifecycle.reap_dead_turns)(resume=False, lease=lease) is None
        assert lease.held_by == "web-2:811/0123456789ab"
        assert "web-2:811/0123456789ab is sweeping" in caplog.text
        assert running(conversation_id) and sweep_intervals(sweep_log) == []
        assert [row.holder for row in sweep_lease_rows()] == ["web-2:811/0123456789ab"]  # not released by the skip
        assert lease_store().release(REAPER_LEASE_TENANT, REAPER_LEASE_KEY, "web-2:811/0123456789ab")
        assert sweep() == [conversation_id]

    def test_a_sweep_of_this_same_process_is_another_holder(self) -> None:
        """Two sweeps of one process (threads, a command beside the in-process reaper) do not share the lease."""
        first, second = SweepLease(), SweepLease()
        assert first.holder != second.holder
        assert async_to_sync(first.acquire)()
        assert not async_to_sync(second.acquire)() and second.held_by == first.holder
        async_to_sync(first.release)()
        assert async_to_sync(second.acquire)()
        async_to_sync(second.release)()

    def test_an_expired_lease_of_a_dead_sweeper_lets_another_sweep(self, caplog: pytest.LogCaptureFixture) -> None:
        [conversation_id] = dead_turns(1)
        hold_sweep_lease("web-3:99/deadbeef0000", ttl=5.0, now=timezone.now() - timedelta(seconds=60))
        with caplog.at_level(logging.INFO, logger=LOGGER.name):
            assert sweep() == [conversation_id]
        assert "Took over the sweep lease of web-3:99/deadbeef0000" in caplog.text
        assert sweep_lease_rows() == []

    def test_a_lease_that_lapses_lets_a_waiting_sweep_in(self) -> None:
        """A holder that died a moment ago: with ``wait``, the sweep goes once its short ttl is over."""
        [conversation_id] = dead_turns(1)
        hold_sweep_lease("web-4:7/cafe00000000", ttl=0.5)
        assert sweep() is None  # no wait: skipped
        began = time.monotonic()
        assert sweep(wait=10.0) == [conversation_id]
        assert 0.1 < time.monotonic() - began < 8.0

    def test_the_lease_is_released_when_the_sweep_fails(self, sweep_log: Path) -> None:
        with pytest.raises(Validation):
            sweep(limit=0)  # the turn store refuses the sweep's query
        assert len(sweep_intervals(sweep_log)) == 1  # it was under the lease
        assert sweep_lease_rows() == []

    def test_keep_reports_a_lease_another_sweep_took_over(self) -> None:
        """A sweep slower than the ttl: its lease lapsed and another took it; between two turns it stops."""
        with override_settings(AGENT_PERSISTENCE={**settings.AGENT_PERSISTENCE, **FAST, "REAPER_LEASE_TTL": 0.2,
                                                  **self.family_settings()}):
            slow, other = SweepLease(), SweepLease()
            assert async_to_sync(slow.acquire)()
            assert async_to_sync(slow.keep)()  # within half the ttl: nothing to do
            time.sleep(0.3)
            assert async_to_sync(other.acquire)()
            assert not async_to_sync(slow.keep)() and slow.held_by == other.holder
            async_to_sync(slow.release)()  # not its lease any more: nothing released
            assert [row.holder for row in sweep_lease_rows()] == [other.holder]
            time.sleep(0.3)
            assert async_to_sync(other.keep)()  # its own lapsed lease, taken by nobody: re-taken
            async_to_sync(other.release)()

    def test_threads_sweeping_at_once_never_overlap(self, sweep_log: Path) -> None:
        """``THREADS`` threads sweep ``ROUNDS`` times each, started together: one sweep body at a time."""
        dead_turns(3)
        assert_one_sweep_at_a_time(run_in_threads(THREADS, sweep_rounds, timeout=120), sweep_log)

    def test_control_without_the_lease_threads_sweeping_at_once_overlap(self, sweep_log: Path) -> None:
        """The same race with ``force=True``: the bodies overlap, so the test above can fail."""
        dead_turns(3)
        assert_sweeps_overlap(run_in_threads(THREADS, sweep_rounds_unleased, timeout=120), sweep_log)

    def test_an_error_while_acquiring_does_not_stop_the_reaper_loop(self, caplog: pytest.LogCaptureFixture) -> None:
        """``reap_forever`` goes on sweeping after sweeps whose acquire fails (here: the store refuses the ttl)."""
        [conversation_id] = dead_turns(1)
        enabled = {**settings.AGENT_PERSISTENCE, **FAST, **self.family_settings(), "REAPER_ENABLED": True}

        async def main() -> None:
            reaper = asyncio.get_running_loop().create_task(lifecycle.reap_forever())
            try:
                with override_settings(AGENT_PERSISTENCE={**enabled, "REAPER_LEASE_TTL": float("nan")}):
                    await asyncio.sleep(0.4)  # several sweeps, each failing at the acquire
                    assert not reaper.done() and await sync_to_async(running)(conversation_id)
                await until_reaped([conversation_id], reaper)  # by a later sweep, the settings mended
            finally:
                await stop_reaper(reaper)

        with override_settings(AGENT_PERSISTENCE=enabled), caplog.at_level(logging.ERROR, logger=LOGGER.name):
            asyncio.run(main())
        assert caplog.text.count("The reaper's sweep failed; retrying.") >= 2
        assert "ttl must be a finite number" in caplog.text

    def test_reap_turns_once_reports_another_sweeper_and_does_nothing(self) -> None:
        [conversation_id] = dead_turns(1)
        hold_sweep_lease("web-5:12/0000aaaa1111")
        output = reap_turns("--wait", "0.3")
        assert output == "Another process is sweeping (web-5:12/0000aaaa1111 holds the sweep lease): nothing done here.\n"
        assert running(conversation_id)

    def test_reap_turns_once_waits_for_the_lease_then_sweeps(self) -> None:
        [conversation_id] = dead_turns(1)
        hold_sweep_lease("web-6:13/0000bbbb2222", ttl=0.5)
        assert reap_turns() == "Closed out 1 dead turn(s).\n"  # the default wait: the lease's ttl (30 s here)
        assert not running(conversation_id)

    def test_reap_turns_force_sweeps_beside_a_held_lease(self) -> None:
        [conversation_id] = dead_turns(1)
        hold_sweep_lease("web-7:14/0000cccc3333")
        assert reap_turns("--force") == "Closed out 1 dead turn(s).\n"
        assert not running(conversation_id)
        assert [row.holder for row in sweep_lease_rows()] == ["web-7:14/0000cccc3333"]  # left alone

    def test_reap_turns_loop_skips_while_another_sweeps(self) -> None:
        """``--loop`` on SIGTERM-less terms: the sweep of one loop iteration, run as the command runs it."""
        hold_sweep_lease("web-8:15/0000dddd4444")
        command_output = io.StringIO()
        from agent_persistence.management.commands.reap_turns import Command

        command = Command(stdout=command_output)

        async def one_iteration() -> None:
            task = asyncio.get_running_loop().create_task(command.sweep(resume=False, loop=True, limit=100, wait=0.0,
                                                                         force=False))
            while "skipped" not in command_output.getvalue():
                await asyncio.sleep(0.02)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

        asyncio.run(asyncio.wait_for(one_iteration(), 10))
        assert command_output.getvalue().startswith(
            "Another process is sweeping (web-8:15/0000dddd4444 holds the sweep lease): skipped this sweep.\n")

    def family_settings(self) -> dict[str, Any]:
        return {}


class TestSweepLeaseOnTheDatabase(SweepLeaseRules):
    """The ORM family, on this run's database (SQLite on a WAL file, or PostgreSQL with DATABASE_URL)."""

    pytestmark = [pytest.mark.django_db(transaction=True)]

    @pytest.fixture(autouse=True)
    def fast(self) -> Iterator[None]:
        with override_settings(AGENT_PERSISTENCE={**settings.AGENT_PERSISTENCE, **FAST}):
            yield

    def test_processes_sweeping_at_once_never_overlap(self, sweep_log: Path) -> None:
        """``PROCESSES`` forked processes sweep ``ROUNDS`` times each, started together: one sweep body at a time."""
        dead_turns(3)
        assert_one_sweep_at_a_time(run_in_processes(PROCESSES, sweep_rounds, timeout=180), sweep_log)

    def test_control_without_the_lease_processes_sweeping_at_once_overlap(self, sweep_log: Path) -> None:
        dead_turns(3)
        assert_sweeps_overlap(run_in_processes(PROCESSES, sweep_rounds_unleased, timeout=180), sweep_log)

    def test_a_lost_database_connection_does_not_stop_the_reaper_loop(self, caplog: pytest.LogCaptureFixture) -> None:
        """PostgreSQL: the reaper's connection is terminated by the server; the next sweeps reconnect and reap."""
        if connection.vendor != "postgresql":
            pytest.skip("a SQLite database is a local file: its connection cannot be lost")
        conversation_ids = dead_turns(1)
        enabled = {**settings.AGENT_PERSISTENCE, **FAST, "REAPER_ENABLED": True, "REAPER_INTERVAL": 0.2}

        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            test_backend = cursor.fetchone()[0]  # the test's own connection (it flushes the database after)

        def terminate_other_connections() -> int:
            """From a thread of its own: the server ends the reaper thread's connection (every other but the test's)."""
            try:
                with connection.cursor() as cursor:
                    cursor.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                                   "WHERE datname = current_database() AND pid <> pg_backend_pid() AND pid <> %s",
                                   [test_backend])
                    return cursor.fetchone()[0]
            finally:
                connection.close()

        async def main() -> None:
            reaper = asyncio.get_running_loop().create_task(lifecycle.reap_forever())
            try:
                # The reaper's sync thread (this loop's: sync_to_async) holds a connection once it queried.
                await sync_to_async(lambda: turn_store().dead_turns(limit=1))()
                assert await sync_to_async(terminate_other_connections, thread_sensitive=False)() >= 1
                deadline = time.monotonic() + 10
                while "The reaper's sweep failed; retrying." not in caplog.text:  # its next acquire met the outage
                    assert time.monotonic() < deadline and not reaper.done()
                    await asyncio.sleep(0.05)
                await until_reaped(conversation_ids, reaper)
            finally:
                await stop_reaper(reaper)

        with override_settings(AGENT_PERSISTENCE=enabled), caplog.at_level(logging.ERROR, logger=LOGGER.name):
            asyncio.run(main())
        failure = caplog.text[caplog.text.index("The reaper's sweep failed; retrying."):]
        assert "in acquire" in failure and "terminating connection" in failure  # at the lease's acquire


class TestSweepLeaseInMemory(SweepLeaseRules):
    """The in-memory family: no database at all (its race runs on threads: a process's memory is its own)."""

    @pytest.fixture(autouse=True)
    def memory_family(self, django_db_blocker: Any) -> Iterator[None]:
        reset_memory_stores()
        with override_settings(AGENT_PERSISTENCE={**settings.AGENT_PERSISTENCE, **FAST, **self.family_settings()}):
            reset_memory_stores()
            with django_db_blocker.block():
                yield
        reset_memory_stores()

    def family_settings(self) -> dict[str, Any]:
        return {"STORES": "agent_persistence.stores.memory.family"}


# -- the setting -------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, -1.0, float("nan"), float("inf"), True, "10"])
def test_a_bad_reaper_lease_ttl_is_check_e003(value: Any) -> None:
    from agent_persistence.checks import check_settings

    with override_settings(AGENT_PERSISTENCE={**settings.AGENT_PERSISTENCE, "REAPER_LEASE_TTL": value}):
        errors = [error for error in check_settings() if "REAPER_LEASE_TTL" in error.msg]
    assert [error.id for error in errors] == ["agent_persistence.E003"], errors


def test_the_reaper_lease_ttl_defaults_to_twice_the_interval_and_may_be_set() -> None:
    from agent_persistence.checks import check_settings

    with override_settings(AGENT_PERSISTENCE={**settings.AGENT_PERSISTENCE, "REAPER_INTERVAL": 7.0}):
        assert lifecycle.reaper_lease_ttl() == 14.0
    with override_settings(AGENT_PERSISTENCE={**settings.AGENT_PERSISTENCE, "REAPER_LEASE_TTL": 3}):
        assert lifecycle.reaper_lease_ttl() == 3.0
        assert [error for error in check_settings() if "REAPER_LEASE_TTL" in error.msg] == []
