"""The shipped SupervisionStore against its contract, and the ORM family's lock order for callers that lock first."""

from __future__ import annotations

import time
import uuid
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from agent_persistence.exceptions import Fenced
from agent_persistence.models import Conversation
from agent_persistence.stores.fencing import fence, lock_supervision
from agent_persistence.stores.supervision import SupervisionStore
from agent_persistence.testing.actors import ALICE
from agent_persistence.testing.concurrency import run_in_threads
from agent_persistence.testing.supervision import SupervisionStoreContract


class TestSupervisionStore(SupervisionStoreContract):
    pass


@pytest.mark.django_db(transaction=True)
def test_a_caller_that_locks_the_conversation_after_lock_supervision_never_deadlocks_with_a_producer() -> None:
    """ORM internals: fence() locks the supervision row, then the producer locks the conversation.

    A caller that locks the conversation itself before claiming in the same
    transaction calls lock_supervision() first, so it takes the locks in the
    producer's order; every producer is fenced and every takeover wins.
    """
    store = SupervisionStore()
    conversations = [Conversation.objects.create(tenant=ALICE.tenant, owner=ALICE.user) for _ in range(4)]
    for round_number in range(1, 4):
        for conversation in conversations:
            now = timezone.now() + timedelta(seconds=60 * round_number)
            epoch = store.claim(ALICE, conversation.pk, message_id=uuid.uuid4(), now=now).epoch

        def produce(conversation: Conversation) -> str:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                try:
                    with transaction.atomic():
                        fence(conversation.pk, epoch)
                        time.sleep(0.005)  # the producer's work between its fence and its write
                        Conversation.objects.select_for_update().get(pk=conversation.pk)
                        Conversation.objects.filter(pk=conversation.pk).update(title=f"round {round_number}")
                except Fenced:
                    return "fenced"
                time.sleep(0.002)  # let a waiting claim in (SQLite's lock is not fair)
            return "never fenced"

        def take_over(index: int, conversation: Conversation) -> str:
            time.sleep(0.05 + 0.01 * index)
            now = timezone.now() + timedelta(seconds=60 * round_number + 30)
            with transaction.atomic():
                lock_supervision(conversation.pk)
                Conversation.objects.select_for_update().get(pk=conversation.pk)
                return f"epoch {store.claim(ALICE, conversation.pk, message_id=uuid.uuid4(), now=now).epoch}"

        def work(index: int) -> str:
            conversation = conversations[index % 4]
            return produce(conversation) if index < 4 else take_over(index, conversation)

        results = run_in_threads(8, work)
        assert results == ["fenced"] * 4 + [f"epoch {epoch + 1}"] * 4, results
        for conversation in conversations:
            row = store.read(conversation.pk)
            store.finish(conversation.pk, epoch=row.epoch, message_id=row.message_id, status="done")


@pytest.mark.django_db
@pytest.mark.skipif(connection.vendor != "postgresql", reason="heap-only updates: PostgreSQL")
def test_a_heartbeat_stamp_is_a_heap_only_update() -> None:
    """Migration 0012: no index holds ``heartbeat_at``, so the fence, a checkpoint save and the batched
    heartbeat stamp it without new index entries (PostgreSQL counts them as HOT updates)."""
    from agent_persistence.models import TurnSupervision
    from agent_persistence.stores.checkpoints import CheckpointStore

    conversation = Conversation.objects.create(tenant=ALICE.tenant, owner=ALICE.user)
    claim = SupervisionStore().claim(ALICE, conversation.pk, message_id=uuid.uuid4())

    def updates() -> tuple[int, int]:
        with connection.cursor() as cursor:
            cursor.execute("SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables WHERE relid = %s::regclass",
                           [TurnSupervision._meta.db_table])
            return cursor.fetchone()

    before = updates()
    with transaction.atomic():
        fence(conversation.pk, claim.epoch)
    CheckpointStore().save(conversation.pk, {"n": 1}, epoch=claim.epoch)
    assert SupervisionStore().heartbeat_many([(conversation.pk, claim.epoch)]) == set()
    after = updates()
    assert (after[0] - before[0], after[1] - before[1]) == (3, 3)
