"""The shipped CheckpointStore against its contract, and its guard against a newer epoch's row."""

from __future__ import annotations

import contextlib
import importlib
import json
import threading
import time
import uuid
from typing import Any, Iterator

import pytest
from django.apps import apps
from django.db import OperationalError, connection, connections, transaction

from agent_persistence.exceptions import Fenced
from agent_persistence.models import AgentCheckpoint, Conversation, TurnSupervision
from agent_persistence.stores import checkpoints
from agent_persistence.stores.checkpoints import CheckpointStore
from agent_persistence.stores.supervision import SupervisionStore
from agent_persistence.testing.actors import ALICE
from agent_persistence.testing.checkpoints import CheckpointStoreContract


class TestCheckpointStore(CheckpointStoreContract):
    pass


@pytest.mark.django_db
def test_a_save_is_fenced_when_a_newer_epoch_saved_the_checkpoint() -> None:
    """A checkpoint row from a later epoch (as a writer outside this store could leave it) is never overwritten."""
    conversation = Conversation.objects.create(tenant=ALICE.tenant, owner=ALICE.user)
    claim = SupervisionStore().claim(ALICE, conversation.pk, message_id=uuid.uuid4())
    AgentCheckpoint.objects.create(conversation=conversation, state={"by": "newer"}, epoch=7)
    store = CheckpointStore()
    with pytest.raises(Fenced):
        store.save(conversation.pk, {"by": "older"}, epoch=claim.epoch)
    assert store.load(conversation.pk) == {"by": "newer"}


@contextlib.contextmanager
def row_locked(model: Any, pk: uuid.UUID) -> Iterator[None]:
    """Another connection holds the row ``pk`` of ``model`` (``SELECT ... FOR UPDATE``) meanwhile."""
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        try:
            with transaction.atomic():
                model.objects.select_for_update().get(pk=pk)
                held.set()
                release.wait(30)
        finally:
            connections.close_all()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(10)
        yield
    finally:
        release.set()
        holder.join(30)


def supervision_row_locked(conversation_id: uuid.UUID) -> Any:
    """Another connection holds the conversation's supervision row meanwhile."""
    return row_locked(TurnSupervision, conversation_id)


def conversation_row_locked(conversation_id: uuid.UUID) -> Any:
    """Another connection holds the conversation row itself meanwhile."""
    return row_locked(Conversation, conversation_id)


def assert_save_times_out(store: CheckpointStore, conversation_id: uuid.UUID, epoch: int) -> None:
    """A save behind a held row lock fails as Django's OperationalError, well within 5 s (the bound is 0.2 s)."""
    started = time.monotonic()
    with pytest.raises(OperationalError):
        store.save(conversation_id, {"n": 2}, epoch=epoch)
    assert time.monotonic() - started < 5


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "postgresql", reason="row locks and deferred key checks: PostgreSQL")
@pytest.mark.parametrize("path", ["function", "one_statement"])
def test_a_first_save_behind_a_locked_conversation_row_fails_within_the_bound(settings: Any, path: str) -> None:
    """The first checkpoint of a conversation inserts a row whose key to the conversation is checked at
    commit (deferred), after the save's own statements: that check's lock wait is bounded too, so a save
    behind another client's lock on the conversation row fails within PRODUCER_LOCK_TIMEOUT (and is
    retried by the producer) instead of waiting the lock out; nothing is written, and a save after the
    lock goes succeeds."""
    conversation = Conversation.objects.create(tenant=ALICE.tenant, owner=ALICE.user)
    claim = SupervisionStore().claim(ALICE, conversation.pk, message_id=uuid.uuid4())
    store = CheckpointStore()
    settings.AGENT_PERSISTENCE = {**settings.AGENT_PERSISTENCE, "PRODUCER_LOCK_TIMEOUT": 0.2}
    if path == "one_statement":
        connection.ensure_connection()
        checkpoints._WITHOUT_FUNCTION.add(connection.connection)
    try:
        with conversation_row_locked(conversation.pk):
            assert_save_times_out(store, conversation.pk, claim.epoch)
            assert not AgentCheckpoint.objects.filter(pk=conversation.pk).exists()
        store.save(conversation.pk, {"n": 3}, epoch=claim.epoch)
        assert store.load(conversation.pk) == {"n": 3}
        with conversation_row_locked(conversation.pk):  # an update of the stored row checks no key: no wait at all
            store.save(conversation.pk, {"n": 4}, epoch=claim.epoch)
        assert store.load(conversation.pk) == {"n": 4}
    finally:
        checkpoints._WITHOUT_FUNCTION.discard(connection.connection)


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "postgresql", reason="the one-statement save, bound server-side: PostgreSQL")
def test_a_save_bound_server_side_keeps_every_field_and_django_errors(settings: Any) -> None:
    """The PostgreSQL save binds its values server-side: each column keeps its type, no statement
    is prepared by name, and a lock timeout behind another client's row lock is Django's
    OperationalError (what the producer retries), with nothing written and the connection still usable."""
    conversation = Conversation.objects.create(tenant=ALICE.tenant, owner=ALICE.user)
    message_id = uuid.uuid4()
    claim = SupervisionStore().claim(ALICE, conversation.pk, message_id=message_id)
    store = CheckpointStore()
    state = {"text": "é\u2028" + "x" * 1_000_000, "n": 2**62, "nested": [{"ok": True}, None]}
    store.save(conversation.pk, state, epoch=claim.epoch, message_id=message_id)
    row = AgentCheckpoint.objects.get(pk=conversation.pk)
    assert (row.message_id, row.epoch, row.size) == (message_id, claim.epoch, len(json.dumps(state, ensure_ascii=False, separators=(",", ":")).encode()))
    assert store.load(conversation.pk) == state
    for n in range(10):  # psycopg's own default would prepare by name from the 5th run; Django's connection does not
        store.save(conversation.pk, {"n": n}, epoch=claim.epoch)  # no message: a NULL of the uuid column
    assert AgentCheckpoint.objects.get(pk=conversation.pk).message_id is None
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_prepared_statements")
        assert cursor.fetchone() == (0,), "a named prepared statement breaks transaction-mode poolers"

    settings.AGENT_PERSISTENCE = {**settings.AGENT_PERSISTENCE, "PRODUCER_LOCK_TIMEOUT": 0.2}
    with supervision_row_locked(conversation.pk):
        assert_save_times_out(store, conversation.pk, claim.epoch)
    assert store.load(conversation.pk) == {"n": 9}
    store.save(conversation.pk, {"n": 3}, epoch=claim.epoch)
    assert store.load(conversation.pk) == {"n": 3}


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "postgresql", reason="the lock bound of the one-statement save: PostgreSQL")
def test_a_save_bounds_its_own_lock_wait_outside_a_transaction_and_is_a_savepoint_inside_one(settings: Any) -> None:
    """The save's lock bound is part of its one statement: outside a transaction a save stuck behind
    a row lock fails within the bound and leaves the connection idle (nothing open, the bound gone);
    inside a caller's transaction a failed save rolls back to its savepoint only."""
    import psycopg

    conversation = Conversation.objects.create(tenant=ALICE.tenant, owner=ALICE.user)
    claim = SupervisionStore().claim(ALICE, conversation.pk, message_id=uuid.uuid4())
    store = CheckpointStore()
    store.save(conversation.pk, {"n": 1}, epoch=claim.epoch)
    raw = connection.connection

    def lock_timeout() -> str:
        with connection.cursor() as cursor:
            cursor.execute("SHOW lock_timeout")
            return cursor.fetchone()[0]

    default = lock_timeout()
    assert raw.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    settings.AGENT_PERSISTENCE = {**settings.AGENT_PERSISTENCE, "PRODUCER_LOCK_TIMEOUT": 0.2}
    with supervision_row_locked(conversation.pk):
        assert_save_times_out(store, conversation.pk, claim.epoch)
        assert raw.info.transaction_status == psycopg.pq.TransactionStatus.IDLE, "the failed save left a transaction open"
        assert lock_timeout() == default, "the save's lock bound outlived it"

        with transaction.atomic():
            Conversation.objects.filter(pk=conversation.pk).update(title="kept")
            with pytest.raises(OperationalError):
                store.save(conversation.pk, {"n": 3}, epoch=claim.epoch)
            assert Conversation.objects.get(pk=conversation.pk).title == "kept"  # the caller's transaction still works
    assert Conversation.objects.get(pk=conversation.pk).title == "kept"
    assert store.load(conversation.pk) == {"n": 1}
    store.save(conversation.pk, {"n": 4}, epoch=claim.epoch)
    assert store.load(conversation.pk) == {"n": 4}
    assert lock_timeout() == default


@pytest.mark.django_db
def test_utf8_text_is_bound_as_text_on_every_backend() -> None:
    """execute_bound sends Utf8Text's bytes as text (PostgreSQL checks they are UTF-8); elsewhere it decodes them."""
    from django.db import DataError

    from agent_persistence.stores.base import Utf8Text, execute_bound

    text = 'é€😀 "quoted" \\ back'
    assert execute_bound("SELECT %s", [Utf8Text(text.encode())]) == [(text,)]
    if connection.vendor == "postgresql":
        assert execute_bound("SELECT pg_typeof(%s)::text", [Utf8Text(b"x")]) == [("text",)]
        with pytest.raises(DataError), transaction.atomic():  # not UTF-8: the server's refusal, as Django's error
            execute_bound("SELECT %s", [Utf8Text(b"\xff")])


def track_function_calls() -> None:
    """Count the calls of PL/pgSQL functions for the rest of this transaction (a superuser's setting)."""
    from django.db import ProgrammingError

    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SET LOCAL track_functions = 'pl'")
    except ProgrammingError:  # permission denied: the test role is not a superuser
        pytest.skip("counting function calls needs a superuser (track_functions)")


def save_function_calls() -> int:
    """How often this transaction called the save function (``track_functions`` must be on in it)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT coalesce(sum(calls), 0) FROM pg_stat_xact_user_functions WHERE funcname = %s",
                       [checkpoints.SAVE_FUNCTION])
        return cursor.fetchone()[0]


@pytest.mark.django_db
@pytest.mark.skipif(connection.vendor != "postgresql", reason="the save function: PostgreSQL")
def test_a_save_runs_the_function_of_migration_0011_and_keeps_the_callers_lock_bound(settings: Any) -> None:
    """Migration 0011 creates the save function and a save calls it (PL/pgSQL keeps its plans, nothing is
    prepared by name); the function puts the caller's own lock bound back when it returns."""
    conversation = Conversation.objects.create(tenant=ALICE.tenant, owner=ALICE.user)
    claim = SupervisionStore().claim(ALICE, conversation.pk, message_id=uuid.uuid4())
    store = CheckpointStore()
    settings.AGENT_PERSISTENCE = {**settings.AGENT_PERSISTENCE, "PRODUCER_LOCK_TIMEOUT": 0.2}
    track_function_calls()
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL lock_timeout = '7s'")
    for n in range(3):
        store.save(conversation.pk, {"n": n}, epoch=claim.epoch)
    with pytest.raises(Fenced):
        store.save(conversation.pk, {"n": "stale"}, epoch=claim.epoch + 1)
    assert save_function_calls() == 4
    assert store.load(conversation.pk) == {"n": 2}
    with connection.cursor() as cursor:
        cursor.execute("SHOW lock_timeout")
        assert cursor.fetchone() == ("7s",)
        cursor.execute("SELECT count(*) FROM pg_prepared_statements")
        assert cursor.fetchone() == (0,)


@pytest.mark.django_db
@pytest.mark.skipif(connection.vendor != "postgresql", reason="the save function: PostgreSQL")
def test_a_database_without_the_save_function_saves_by_the_one_statement() -> None:
    """A database built without migrations lacks the function: the save takes the one statement instead,
    with the same fence, and the caller's transaction stays usable."""
    migration = importlib.import_module("agent_persistence.migrations.0011_checkpoint_save_function")
    conversation = Conversation.objects.create(tenant=ALICE.tenant, owner=ALICE.user)
    claim = SupervisionStore().claim(ALICE, conversation.pk, message_id=uuid.uuid4())
    store = CheckpointStore()
    with connection.schema_editor() as editor:  # rolled back with the test's transaction
        migration.drop_function(apps, editor)
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT to_regprocedure(%s)", [migration.SIGNATURE])
            assert cursor.fetchone() == (None,)
        store.save(conversation.pk, {"n": 1}, epoch=claim.epoch)
        assert connection.connection in checkpoints._WITHOUT_FUNCTION
        with pytest.raises(Fenced):
            store.save(conversation.pk, {"n": "stale"}, epoch=claim.epoch + 1)
        AgentCheckpoint.objects.filter(pk=conversation.pk).update(epoch=claim.epoch + 5)
        with pytest.raises(Fenced):
            store.save(conversation.pk, {"n": "older"}, epoch=claim.epoch)
        assert store.load(conversation.pk) == {"n": 1}

        with connection.schema_editor() as editor:
            migration.create_function(apps, editor)
        checkpoints._WITHOUT_FUNCTION.discard(connection.connection)
        track_function_calls()
        AgentCheckpoint.objects.filter(pk=conversation.pk).update(epoch=claim.epoch)
        store.save(conversation.pk, {"n": 2}, epoch=claim.epoch)
        assert save_function_calls() == 1
        assert store.load(conversation.pk) == {"n": 2}
    finally:
        checkpoints._WITHOUT_FUNCTION.discard(connection.connection)
