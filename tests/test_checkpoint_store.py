"""The shipped CheckpointStore against its contract, and its guard against a newer epoch's row."""

from __future__ import annotations

import json
import threading
import time
import uuid
from typing import Any

import pytest
from django.db import OperationalError, connection, connections, transaction

from agent_persistence.exceptions import Fenced
from agent_persistence.models import AgentCheckpoint, Conversation, TurnSupervision
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
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        try:
            with transaction.atomic():
                TurnSupervision.objects.select_for_update().get(pk=conversation.pk)
                held.set()
                release.wait(30)
        finally:
            connections.close_all()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(10)
        started = time.monotonic()
        with pytest.raises(OperationalError):
            store.save(conversation.pk, {"n": 2}, epoch=claim.epoch)
        assert time.monotonic() - started < 5
    finally:
        release.set()
        holder.join(30)
    assert store.load(conversation.pk) == {"n": 9}
    store.save(conversation.pk, {"n": 3}, epoch=claim.epoch)
    assert store.load(conversation.pk) == {"n": 3}
