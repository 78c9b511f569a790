"""The contract of a supervision store, and helpers the turn-runtime suites share.

Subclass :class:`SupervisionStoreContract` and override ``make_store()`` to
run it against your backend. The races run real threads (and forked
processes) on committed data, so they need a database that supports concurrent
transactions.
"""

from __future__ import annotations

import threading
import time
import uuid
from datetime import datetime, timedelta
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.conf import settings
from django.test import override_settings
from django.utils import timezone

from ..conf import app_settings
from ..exceptions import Busy, ConversationNotOwned, Fenced, Gone, NotFound, Validation
from ..models import Conversation, SupervisionStatus
from ..stores.supervision import Claim, PreviousTurn
from .actors import ALICE, BOB, MALLORY
from .concurrency import run_in_threads
from .family import FamilyContract


def dead_after(seconds: float) -> Any:
    """``override_settings`` with a short ``DEAD_AFTER`` (the other settings kept)."""
    configured = getattr(settings, "AGENT_PERSISTENCE", {}) or {}
    return override_settings(AGENT_PERSISTENCE={**configured, "DEAD_AFTER": seconds})


class SupervisionStoreContract(FamilyContract):
    """Claims, liveness, fencing and the producer's writes of a supervision store."""

    def make_store(self) -> Any:
        return self.family.supervision

    @pytest.fixture
    def store(self, stores: Any) -> Any:
        return self.make_store()

    def claim(self, store: Any, conversation: Conversation, **kwargs: Any) -> Claim:
        kwargs.setdefault("message_id", uuid.uuid4())
        return store.claim(ALICE, conversation.pk, **kwargs)

    # -- status and liveness ------------------------------------------------------------------

    @pytest.mark.django_db
    def test_a_conversation_without_a_turn_is_idle(self, store: Any) -> None:
        conversation = self.new_conversation()
        status = store.status(ALICE, conversation.pk)
        assert (status.state, status.message_id, status.epoch, status.heartbeat_age) == ("idle", None, 0, None)
        assert store.read(conversation.pk) is None

    @pytest.mark.django_db
    def test_a_claimed_turn_is_alive_and_reports_its_producer(self, store: Any) -> None:
        conversation = self.new_conversation()
        message_id, run_id = uuid.uuid4(), uuid.uuid4()
        claim = self.claim(store, conversation, message_id=message_id, run_id=run_id, replica="web-1:42")
        status = store.status(ALICE, conversation.pk)
        assert status.state == "alive"
        assert (status.message_id, status.run_id, status.epoch, status.replica) == (message_id, run_id, 1, "web-1:42")
        assert status.heartbeat_age is not None and 0 <= status.heartbeat_age < 1
        assert claim.epoch == 1 and status.running

    @pytest.mark.django_db
    def test_a_heartbeat_older_than_dead_after_reads_dead_and_dead_is_never_stored(self, store: Any) -> None:
        conversation = self.new_conversation()
        self.claim(store, conversation)
        heartbeat_at = self.row_of(conversation).heartbeat_at
        limit = timedelta(seconds=app_settings.DEAD_AFTER)
        assert store.status(ALICE, conversation.pk, now=heartbeat_at + limit).state == "alive"
        assert store.status(ALICE, conversation.pk, now=heartbeat_at + limit + timedelta(milliseconds=1)).state == "dead"
        assert self.row_of(conversation).status == SupervisionStatus.RUNNING

    @pytest.mark.django_db
    def test_the_dead_verdict_follows_the_real_clock(self, store: Any) -> None:
        with dead_after(0.2):
            conversation = self.new_conversation()
            self.claim(store, conversation)
            assert store.status(ALICE, conversation.pk).state == "alive"
            time.sleep(0.3)
            status = store.status(ALICE, conversation.pk)
            assert status.state == "dead" and status.heartbeat_age > 0.2
            assert [row.pk for row in store.list_dead()] == [conversation.pk]

    @pytest.mark.django_db
    @pytest.mark.parametrize("status", ["done", "errored"])
    def test_a_finished_turn_reads_as_its_status(self, store: Any, status: str) -> None:
        conversation = self.new_conversation()
        claim = self.claim(store, conversation)
        assert store.finish(conversation.pk, epoch=claim.epoch, message_id=claim.message_id, status=status)
        assert store.status(ALICE, conversation.pk, now=self.when_dead(conversation)).state == status

    @pytest.mark.django_db
    def test_status_follows_the_read_rules_and_never_leaks_existence(self, store: Any) -> None:
        private, shared = self.new_conversation(), self.new_conversation(shared=True)
        self.claim(store, shared)
        assert store.status(BOB, shared.pk).state == "alive"
        for scope, conversation_id in [(BOB, private.pk), (MALLORY, shared.pk), (ALICE, uuid.uuid4()), (ALICE, "x")]:
            with pytest.raises(NotFound):
                store.status(scope, conversation_id)

    # -- claim --------------------------------------------------------------------------------

    @pytest.mark.django_db
    def test_claim_writes_a_running_row_and_raises_the_conversation_epoch(self, store: Any) -> None:
        conversation = self.new_conversation()
        message_id, run_id = uuid.uuid4(), uuid.uuid4()
        claim = self.claim(store, conversation, message_id=message_id, run_id=run_id, replica="r1")
        assert claim == Claim(epoch=1, message_id=message_id, run_id=run_id, taken_over=False, previous=None)
        row = store.read(conversation.pk)
        assert (row.status, row.message_id, row.run_id, row.epoch, row.replica) == ("running", message_id, run_id, 1, "r1")
        assert self.conversation_epoch(conversation) == 1

    @pytest.mark.django_db
    def test_claim_refuses_a_live_turn_with_its_occupant_and_changes_nothing(self, store: Any) -> None:
        conversation = self.new_conversation()
        first = self.claim(store, conversation, run_id=uuid.uuid4())
        with pytest.raises(Busy) as refused:
            self.claim(store, conversation)
        occupant = refused.value.details["occupant"]
        assert refused.value.code == "conversation_busy"
        assert occupant["message_id"] == str(first.message_id) and occupant["run_id"] == str(first.run_id)
        assert occupant["epoch"] == 1 and 0 <= occupant["heartbeat_age"] < 1
        assert (self.row_of(conversation).message_id, self.conversation_epoch(conversation)) == (first.message_id, 1)

    @pytest.mark.django_db
    @pytest.mark.parametrize("status", ["done", "errored"])
    def test_claim_replaces_a_finished_turn_at_the_next_epoch(self, store: Any, status: str) -> None:
        conversation = self.new_conversation()
        first = self.claim(store, conversation, run_id=uuid.uuid4())
        store.finish(conversation.pk, epoch=1, message_id=first.message_id, status=status)
        second = self.claim(store, conversation)
        assert (second.epoch, second.taken_over) == (2, False)
        assert second.previous == PreviousTurn(first.message_id, first.run_id, 1)
        assert self.row_of(conversation).status == "running" and self.conversation_epoch(conversation) == 2

    @pytest.mark.django_db
    def test_claim_takes_over_a_dead_turn(self, store: Any) -> None:
        conversation = self.new_conversation()
        first = self.claim(store, conversation)
        now = self.when_dead(conversation)
        second = self.claim(store, conversation, now=now)
        assert (second.epoch, second.taken_over, second.previous.message_id) == (2, True, first.message_id)
        row = self.row_of(conversation)
        assert (row.message_id, row.heartbeat_at, row.claimed_at) == (second.message_id, now, now)

    @pytest.mark.django_db
    def test_claim_is_for_the_owner_only(self, store: Any) -> None:
        private, shared = self.new_conversation(), self.new_conversation(shared=True)
        attempts = [
            (BOB, private.pk, NotFound),
            (MALLORY, private.pk, NotFound),
            (BOB, shared.pk, ConversationNotOwned),
            (ALICE, uuid.uuid4(), NotFound),
            (ALICE, "not-a-uuid", NotFound),
        ]
        for scope, conversation_id, error in attempts:
            with pytest.raises(error):
                store.claim(scope, conversation_id, message_id=uuid.uuid4())
        assert self.row_of(private) is None and self.row_of(shared) is None
        assert self.conversation_epoch(private) == self.conversation_epoch(shared) == 0

    @pytest.mark.django_db
    @pytest.mark.parametrize(
        "arguments",
        [
            {"message_id": "nope"},
            {"message_id": None},
            {"run_id": "nope"},
            {"replica": "r" * 256},
            {"replica": "r\x00"},
            {"replica": 7},
            {"now": datetime(2030, 1, 1)},
        ],
        ids=["message_id", "no message_id", "run_id", "long replica", "NUL replica", "replica type", "naive now"],
    )
    def test_claim_refuses_bad_input_and_writes_nothing(self, store: Any, arguments: dict[str, Any]) -> None:
        conversation = self.new_conversation()
        with pytest.raises(Validation):
            store.claim(ALICE, conversation.pk, **{"message_id": uuid.uuid4(), **arguments})
        assert self.row_of(conversation) is None and self.conversation_epoch(conversation) == 0

    # -- claim_for_resume ---------------------------------------------------------------------

    @pytest.mark.django_db
    def test_resume_takes_over_the_dead_turn_keeping_its_message_and_run(self, store: Any) -> None:
        conversation = self.new_conversation()
        first = self.claim(store, conversation, run_id=uuid.uuid4())
        now = self.when_dead(conversation)
        resumed = store.claim_for_resume(ALICE, conversation.pk, message_id=first.message_id, replica="r2", now=now)
        assert resumed == Claim(2, first.message_id, first.run_id, True, PreviousTurn(first.message_id, first.run_id, 1))
        row = self.row_of(conversation)
        assert (row.status, row.epoch, row.replica, row.heartbeat_at) == ("running", 2, "r2", now)
        assert self.conversation_epoch(conversation) == 2

    @pytest.mark.django_db
    def test_resume_of_a_live_turn_is_busy(self, store: Any) -> None:
        conversation = self.new_conversation()
        first = self.claim(store, conversation)
        with pytest.raises(Busy):
            store.claim_for_resume(ALICE, conversation.pk, message_id=first.message_id)
        assert self.row_of(conversation).epoch == 1

    @pytest.mark.django_db
    @pytest.mark.parametrize("situation", ["no turn", "done", "errored", "another message"])
    def test_resume_of_a_turn_that_is_not_running_is_gone(self, store: Any, situation: str) -> None:
        conversation = self.new_conversation()
        message_id = uuid.uuid4()
        if situation != "no turn":
            self.claim(store, conversation, message_id=message_id)
        if situation in ("done", "errored"):
            store.finish(conversation.pk, epoch=1, message_id=message_id, status=situation)
        asked_for = uuid.uuid4() if situation == "another message" else message_id
        now = self.when_dead(conversation) if situation != "no turn" else None
        with pytest.raises(Gone) as refused:
            store.claim_for_resume(ALICE, conversation.pk, message_id=asked_for, now=now)
        assert refused.value.code == "turn_not_resumable"
        assert self.conversation_epoch(conversation) == (0 if situation == "no turn" else 1)

    @pytest.mark.django_db
    def test_resume_is_for_the_owner_only(self, store: Any) -> None:
        conversation = self.new_conversation(shared=True)
        first = self.claim(store, conversation)
        now = self.when_dead(conversation)
        with pytest.raises(ConversationNotOwned):
            store.claim_for_resume(BOB, conversation.pk, message_id=first.message_id, now=now)
        with pytest.raises(NotFound):
            store.claim_for_resume(MALLORY, conversation.pk, message_id=first.message_id, now=now)
        assert self.row_of(conversation).epoch == 1

    # -- compare_and_swap ---------------------------------------------------------------------

    @pytest.mark.django_db
    def test_compare_and_swap_with_none_writes_only_when_there_is_no_row(self, store: Any) -> None:
        conversation = self.new_conversation()
        first, second = uuid.uuid4(), uuid.uuid4()
        assert store.compare_and_swap(conversation.pk, None, status="running", message_id=first, epoch=1)
        assert not store.compare_and_swap(conversation.pk, None, status="running", message_id=second, epoch=2)
        row = self.row_of(conversation)
        assert (row.message_id, row.epoch, self.conversation_epoch(conversation)) == (first, 1, 1)

    @pytest.mark.django_db
    def test_compare_and_swap_writes_iff_the_stored_epoch_is_the_expected_one(self, store: Any) -> None:
        conversation = self.new_conversation()
        store.compare_and_swap(conversation.pk, None, status="running", message_id=uuid.uuid4(), epoch=1)
        winner = uuid.uuid4()
        assert not store.compare_and_swap(conversation.pk, 2, status="running", message_id=uuid.uuid4(), epoch=3)
        assert store.compare_and_swap(conversation.pk, 1, status="done", message_id=winner, epoch=2, replica="r")
        assert not store.compare_and_swap(conversation.pk, 1, status="running", message_id=uuid.uuid4(), epoch=3)
        row = self.row_of(conversation)
        assert (row.status, row.message_id, row.epoch, row.replica) == ("done", winner, 2, "r")
        assert self.conversation_epoch(conversation) == 2

    @pytest.mark.django_db
    def test_compare_and_swap_never_reuses_an_epoch(self, store: Any) -> None:
        conversation = self.new_conversation()
        message_id = uuid.uuid4()
        assert store.compare_and_swap(conversation.pk, None, status="running", message_id=message_id, epoch=3)
        assert not store.compare_and_swap(conversation.pk, 3, status="running", message_id=message_id, epoch=3)
        assert store.delete(conversation.pk, message_id=message_id, epoch=3)
        for stale in (1, 3):
            assert not store.compare_and_swap(conversation.pk, None, status="running", message_id=message_id, epoch=stale)
        assert self.row_of(conversation) is None
        assert store.compare_and_swap(conversation.pk, None, status="running", message_id=message_id, epoch=4)
        assert self.conversation_epoch(conversation) == 4

    @pytest.mark.django_db
    def test_compare_and_swap_refuses_bad_input(self, store: Any) -> None:
        conversation = self.new_conversation()
        good = {"status": "running", "message_id": uuid.uuid4(), "epoch": 1}
        for bad in [{"status": "dead"}, {"epoch": 0}, {"epoch": True}, {"epoch": 2**63}, {"message_id": "x"}]:
            with pytest.raises(Validation):
                store.compare_and_swap(conversation.pk, None, **{**good, **bad})
        with pytest.raises(Validation):
            store.compare_and_swap(conversation.pk, "1", **good)
        with pytest.raises(NotFound):
            store.compare_and_swap(uuid.uuid4(), None, **good)
        assert self.row_of(conversation) is None and self.conversation_epoch(conversation) == 0

    # -- finish, delete -----------------------------------------------------------------------

    @pytest.mark.django_db
    def test_finish_writes_once_and_only_for_the_holding_epoch_and_message(self, store: Any) -> None:
        conversation = self.new_conversation()
        claim = self.claim(store, conversation)
        assert not store.finish(conversation.pk, epoch=2, message_id=claim.message_id, status="done")
        assert not store.finish(conversation.pk, epoch=1, message_id=uuid.uuid4(), status="done")
        assert self.row_of(conversation).status == "running"
        assert store.finish(conversation.pk, epoch=1, message_id=claim.message_id, status="errored")
        assert not store.finish(conversation.pk, epoch=1, message_id=claim.message_id, status="done")
        assert self.row_of(conversation).status == "errored"
        with pytest.raises(Validation):
            store.finish(conversation.pk, epoch=1, message_id=claim.message_id, status="running")

    @pytest.mark.django_db
    def test_a_queued_turn_reads_queued_until_one_worker_takes_it(self, store: Any) -> None:
        """``TURN_RUNNER = "tasks"``: claimed for the replica ``queued``, taken once (a task run twice takes nothing)."""
        conversation = self.new_conversation()
        run_id = uuid.uuid4()
        claim = self.claim(store, conversation, run_id=run_id, replica="queued")
        assert store.status(ALICE, conversation.pk).state == "queued"
        assert not store.take_queued(conversation.pk, epoch=claim.epoch + 1, run_id=run_id, replica="worker-1:7")
        assert not store.take_queued(conversation.pk, epoch=claim.epoch, run_id=uuid.uuid4(), replica="worker-1:7")
        assert store.take_queued(conversation.pk, epoch=claim.epoch, run_id=run_id, replica="worker-1:7")
        assert not store.take_queued(conversation.pk, epoch=claim.epoch, run_id=run_id, replica="worker-2:8")
        status = store.status(ALICE, conversation.pk)
        assert (status.state, status.replica) == ("alive", "worker-1:7")

    @pytest.mark.django_db
    def test_a_queued_turn_reads_dead_after_queued_dead_after_not_dead_after(self, store: Any) -> None:
        conversation = self.new_conversation()
        self.claim(store, conversation, replica="queued")
        later = self.row_of(conversation).heartbeat_at + timedelta(seconds=app_settings.DEAD_AFTER + 1)
        assert store.status(ALICE, conversation.pk, now=later).state == "queued"
        assert store.list_dead(now=later) == []
        much_later = self.row_of(conversation).heartbeat_at + timedelta(seconds=app_settings.QUEUED_DEAD_AFTER + 1)
        assert store.status(ALICE, conversation.pk, now=much_later).state == "dead"
        assert [row.conversation_id for row in store.list_dead(now=much_later)] == [conversation.pk]

    @pytest.mark.django_db
    def test_a_taken_over_producer_cannot_finish_the_new_turn(self, store: Any) -> None:
        conversation = self.new_conversation()
        old = self.claim(store, conversation)
        new = self.claim(store, conversation, message_id=old.message_id, now=self.when_dead(conversation))
        assert not store.finish(conversation.pk, epoch=old.epoch, message_id=old.message_id, status="errored")
        assert (self.row_of(conversation).status, self.row_of(conversation).epoch) == ("running", new.epoch)

    @pytest.mark.django_db
    def test_delete_removes_the_row_only_while_it_holds_message_and_epoch(self, store: Any) -> None:
        conversation = self.new_conversation()
        claim = self.claim(store, conversation)
        assert not store.delete(conversation.pk, message_id=uuid.uuid4(), epoch=1)
        assert not store.delete(conversation.pk, message_id=claim.message_id, epoch=2)
        assert self.row_of(conversation) is not None
        assert store.delete(conversation.pk, message_id=claim.message_id, epoch=1)
        assert self.row_of(conversation) is None
        assert not store.delete(conversation.pk, message_id=claim.message_id, epoch=1)

    @pytest.mark.django_db
    def test_epochs_never_repeat_after_the_row_is_deleted(self, store: Any) -> None:
        conversation = self.new_conversation()
        epochs = []
        for _ in range(3):
            claim = self.claim(store, conversation)
            epochs.append(claim.epoch)
            assert store.delete(conversation.pk, message_id=claim.message_id, epoch=claim.epoch)
        assert epochs == [1, 2, 3]

    # -- fencing and heartbeats ---------------------------------------------------------------

    @pytest.mark.django_db
    def test_fence_passes_the_holding_epoch_and_stamps_its_heartbeat(self, store: Any) -> None:
        conversation = self.new_conversation()
        self.claim(store, conversation, now=timezone.now() - timedelta(seconds=60))
        before = self.row_of(conversation).heartbeat_at
        assert store.heartbeat_many([(conversation.pk, 1)]) == set()
        assert self.row_of(conversation).heartbeat_at > before

    @pytest.mark.django_db
    @pytest.mark.parametrize("situation", ["no turn", "taken over", "finished", "released"])
    def test_fence_refuses_a_stale_producer_and_writes_nothing(self, store: Any, situation: str) -> None:
        conversation = self.new_conversation()
        if situation != "no turn":
            claim = self.claim(store, conversation)
            if situation == "taken over":
                self.claim(store, conversation, now=self.when_dead(conversation))
            elif situation == "finished":
                store.finish(conversation.pk, epoch=1, message_id=claim.message_id, status="done")
            else:
                store.force_release(conversation.pk)
        before = self.row_of(conversation)
        assert store.heartbeat_many([(conversation.pk, 1)]) == {conversation.pk}
        after = self.row_of(conversation)
        if before is None:
            assert after is None
        else:
            assert (after.heartbeat_at, after.epoch) == (before.heartbeat_at, before.epoch)

    @pytest.mark.django_db
    def test_heartbeat_many_reports_exactly_the_fenced_turns(self, store: Any) -> None:
        conversations = [self.new_conversation() for _ in range(6)]
        claims = {c.pk: self.claim(store, c) for c in conversations}
        taken_over, finished, deleted, live = conversations[0:2], conversations[2], conversations[3], conversations[4:]
        for conversation in taken_over:
            self.claim(store, conversation, now=self.when_dead(conversation))
        store.finish(finished.pk, epoch=1, message_id=claims[finished.pk].message_id, status="done")
        store.delete(deleted.pk, message_id=claims[deleted.pk].message_id, epoch=1)
        stamped_at = timezone.now() + timedelta(seconds=5)
        fenced = store.heartbeat_many([(c.pk, 1) for c in conversations], now=stamped_at)
        assert fenced == {c.pk for c in [*taken_over, finished, deleted]}
        assert [self.row_of(c).heartbeat_at for c in live] == [stamped_at, stamped_at]
        assert all(self.row_of(c).heartbeat_at != stamped_at for c in [*taken_over, finished])
        assert store.heartbeat_many([]) == set()

    @pytest.mark.django_db
    def test_heartbeat_many_handles_more_turns_than_one_statement_holds(self, store: Any) -> None:
        conversations = [self.new_conversation() for _ in range(3)]
        for conversation in conversations:
            self.claim(store, conversation)
        unknown = [uuid.uuid4() for _ in range(1200)]
        entries = [(pk, 1) for pk in unknown] + [(str(c.pk), 1) for c in conversations]
        assert store.heartbeat_many(entries) == set(unknown)

    @pytest.mark.django_db
    def test_heartbeat_many_refuses_malformed_entries(self, store: Any) -> None:
        for entries in [[("x", 1)], [(uuid.uuid4(), "1")], [(uuid.uuid4(),)], "nope", [uuid.uuid4()]]:
            with pytest.raises(Validation):
                store.heartbeat_many(entries)

    # -- the reaper and operators -------------------------------------------------------------

    @pytest.mark.django_db
    def test_list_dead_returns_dead_running_turns_oldest_first(self, store: Any) -> None:
        now = timezone.now()
        ages = {"dead old": 60, "dead young": 10, "alive": 1}
        conversations = {}
        for name, age in ages.items():
            conversations[name] = self.new_conversation()
            self.claim(store, conversations[name], now=now - timedelta(seconds=age))
        finished = self.new_conversation()
        claim = self.claim(store, finished, now=now - timedelta(seconds=90))
        store.finish(finished.pk, epoch=claim.epoch, message_id=claim.message_id, status="done")
        dead = store.list_dead(now=now)
        assert [row.pk for row in dead] == [conversations["dead old"].pk, conversations["dead young"].pk]
        assert [row.pk for row in store.list_dead(now=now, limit=1)] == [conversations["dead old"].pk]

    @pytest.mark.django_db
    def test_force_release_errors_the_turn_and_fences_its_producer(self, store: Any) -> None:
        conversation = self.new_conversation()
        claim = self.claim(store, conversation)
        assert store.force_release(conversation.pk)
        assert self.row_of(conversation).status == "errored" and self.conversation_epoch(conversation) == 2
        assert store.heartbeat_many([(conversation.pk, claim.epoch)]) == {conversation.pk}
        assert not store.force_release(conversation.pk)
        assert self.claim(store, conversation).epoch == 3
        with pytest.raises(NotFound):
            store.force_release(uuid.uuid4())

    @pytest.mark.django_db
    def test_async_twins_run_the_same_operations(self, store: Any) -> None:
        conversation = self.new_conversation()
        message_id = uuid.uuid4()
        claim = async_to_sync(store.aclaim)(ALICE, conversation.pk, message_id=message_id)
        assert async_to_sync(store.astatus)(ALICE, conversation.pk).state == "alive"
        assert async_to_sync(store.aheartbeat_many)([(conversation.pk, claim.epoch)]) == set()
        assert async_to_sync(store.afinish)(conversation.pk, epoch=1, message_id=message_id, status="done")
        assert async_to_sync(store.aread)(conversation.pk).status == "done"

    # -- races --------------------------------------------------------------------------------

    @pytest.mark.django_db(transaction=True)
    def test_of_twenty_concurrent_claims_exactly_one_wins_every_round(self, store: Any) -> None:
        conversation = self.new_conversation()
        for round_number in range(1, 21):
            message_ids = [uuid.uuid4() for _ in range(20)]
            results = run_in_threads(20, lambda i: store.claim(ALICE, conversation.pk, message_id=message_ids[i]))
            claims = [result for result in results if isinstance(result, Claim)]
            refused = [result for result in results if isinstance(result, Busy)]
            assert (len(claims), len(refused)) == (1, 19), results
            winner = claims[0]
            assert winner.epoch == round_number
            assert all(busy.details["occupant"]["message_id"] == str(winner.message_id) for busy in refused)
            assert self.row_of(conversation).message_id == winner.message_id
            assert store.finish(conversation.pk, epoch=winner.epoch, message_id=winner.message_id, status="done")
        assert self.conversation_epoch(conversation) == 20

    @pytest.mark.django_db(transaction=True)
    def test_of_concurrent_claims_from_processes_exactly_one_wins(self, store: Any) -> None:
        conversation = self.new_conversation()

        def attempt(index: int) -> str:
            try:
                self.make_store().claim(ALICE, conversation.pk, message_id=uuid.uuid4())
            except Busy:
                return "busy"
            return "won"

        for round_number in range(1, 4):
            results = self.family.run_in_processes(6, attempt)
            assert sorted(results) == ["busy"] * 5 + ["won"], results
            row = self.row_of(conversation)
            assert row.epoch == round_number
            store.finish(conversation.pk, epoch=row.epoch, message_id=row.message_id, status="done")

    @pytest.mark.django_db(transaction=True)
    def test_of_twenty_compare_and_swaps_on_one_epoch_exactly_one_writes(self, store: Any) -> None:
        conversation = self.new_conversation()
        expected: int | None = None
        for round_number in range(1, 11):
            message_ids = [uuid.uuid4() for _ in range(20)]

            def swap(index: int) -> bool:
                return store.compare_and_swap(
                    conversation.pk, expected, status="running", message_id=message_ids[index], epoch=round_number
                )

            results = run_in_threads(20, swap)
            assert results.count(True) == 1 and results.count(False) == 19, results
            row = self.row_of(conversation)
            assert (row.epoch, row.message_id) == (round_number, message_ids[results.index(True)])
            expected = round_number

    @pytest.mark.django_db(transaction=True)
    def test_a_takeover_waits_for_the_fenced_write_in_flight_and_no_write_follows_it(self, store: Any) -> None:
        """A producer's fenced writes (checkpoint saves here) stop at the takeover: none lands after it."""
        checkpoints = self.family.checkpoints
        conversation = self.new_conversation()
        self.claim(store, conversation)
        done = threading.Event()
        committed: list[int] = []

        def produce(index: int) -> str:
            # A producer writes (fenced) until a takeover stops it.
            write = 0
            try:
                while not done.is_set():
                    write += 1
                    checkpoints.save(conversation.pk, {"write": write}, epoch=1)
                    committed.append(write)
                return "not fenced"
            except Fenced:
                return "fenced"

        def take_over(index: int) -> Any:
            time.sleep(0.2)
            try:
                claim = self.claim(store, conversation, now=timezone.now() + timedelta(seconds=60))
                return claim, checkpoints.load(conversation.pk)
            finally:
                time.sleep(0.2)
                done.set()

        produced, (claim, state_at_takeover) = run_in_threads(2, lambda i: produce(i) if i == 0 else take_over(i))
        assert produced == "fenced" and claim.epoch == 2 and committed
        assert checkpoints.load(conversation.pk) == state_at_takeover == {"write": committed[-1]}

    @pytest.mark.django_db(transaction=True)
    def test_a_stale_heartbeat_never_touches_the_new_producers_row(self, store: Any) -> None:
        conversations = [self.new_conversation() for _ in range(5)]
        for conversation in conversations:
            self.claim(store, conversation)
        entries = [(c.pk, 1) for c in conversations]
        claimed_at = timezone.now() + timedelta(seconds=60)

        def heartbeat(index: int) -> set[uuid.UUID]:
            fenced: set[uuid.UUID] = set()
            deadline = time.monotonic() + 20
            while fenced != {c.pk for c in conversations} and time.monotonic() < deadline:
                fenced |= store.heartbeat_many(entries)
            return fenced

        def take_over(index: int) -> list[int]:
            epochs = []
            for conversation in conversations:
                time.sleep(0.02)
                epochs.append(self.claim(store, conversation, now=claimed_at).epoch)
            return epochs

        fenced, epochs = run_in_threads(2, lambda i: heartbeat(i) if i == 0 else take_over(i))
        assert fenced == {c.pk for c in conversations} and epochs == [2] * 5
        assert [self.row_of(c).heartbeat_at for c in conversations] == [claimed_at] * 5

    @pytest.mark.django_db(transaction=True)
    def test_a_claim_never_deadlocks_with_a_producer_writing_under_its_fence(self, store: Any) -> None:
        """A producer's fenced write that also locks the conversation (a run's creation) and takeovers race.

        Every producer is fenced by the takeover of its conversation, every
        takeover wins at the next epoch, and nothing deadlocks (PostgreSQL
        would abort one side with a deadlock error).
        """
        runs = self.family.runs
        conversations = [self.new_conversation() for _ in range(4)]
        for round_number in range(1, 4):
            for conversation in conversations:
                epoch = self.claim(store, conversation, now=timezone.now() + timedelta(seconds=60 * round_number)).epoch

            def produce(conversation: Conversation) -> str:
                deadline = time.monotonic() + 20
                while time.monotonic() < deadline:
                    try:
                        runs.create_or_resume(ALICE, conversation.pk, id=uuid.uuid4(), message_id=uuid.uuid4(), epoch=epoch)
                    except Fenced:
                        return "fenced"
                    time.sleep(0.002)  # let a waiting claim in (SQLite's lock is not fair)
                return "never fenced"

            def take_over(index: int, conversation: Conversation) -> str:
                time.sleep(0.05 + 0.01 * index)
                now = timezone.now() + timedelta(seconds=60 * round_number + 30)
                return f"epoch {self.claim(store, conversation, now=now).epoch}"

            def work(index: int) -> str:
                conversation = conversations[index % 4]
                return produce(conversation) if index < 4 else take_over(index, conversation)

            results = run_in_threads(8, work)
            assert results == ["fenced"] * 4 + [f"epoch {epoch + 1}"] * 4, results
            for conversation in conversations:
                row = self.row_of(conversation)
                store.finish(conversation.pk, epoch=row.epoch, message_id=row.message_id, status="done")
