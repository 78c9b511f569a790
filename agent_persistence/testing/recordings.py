"""The contract of a recording store.

Subclass :class:`RecordingStoreContract` and override ``make_stores()`` (the
family: recordings are fenced by its supervision store) or ``make_store()`` to
run it against your backend. It asserts through the store API only.
"""

from __future__ import annotations

import threading
import time
import uuid
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.conf import settings
from django.test import override_settings
from django.utils import timezone

from ..exceptions import Fenced, NotFound, StorageLimit, Validation
from ..models import Conversation
from ..stores.supervision import Claim
from .actors import ALICE, BOB, MALLORY
from .concurrency import run_in_threads
from .family import FamilyContract, frozen_clock


def flush_record(conversation_id: Any, message_id: Any, index: int, *, epoch: int = 1, **message: Any) -> dict[str, Any]:
    """One record of a ``put_many`` batch."""
    return {"conversation_id": conversation_id, "message_id": message_id, "index": index, "message": message,
            "epoch": epoch}


class RecordingStoreContract(FamilyContract):
    """Fenced, epoch-guarded, never torn: the stream recording of a conversation."""

    def make_store(self) -> Any:
        return self.family.recordings

    @pytest.fixture
    def store(self, stores: Any) -> Any:
        return self.make_store()

    def record_of(self, conversation: Any) -> Any:
        return self.family.recordings.read_unscoped(conversation.pk)

    def snapshot(self, conversation: Any) -> tuple[Any, ...] | None:
        record = self.record_of(conversation)
        return None if record is None else (record.message_id, record.index, record.message, record.epoch, record.updated_at)

    def start_turn(self, conversation: Conversation, **kwargs: Any) -> Claim:
        kwargs.setdefault("message_id", uuid.uuid4())
        return self.family.supervision.claim(ALICE, conversation.pk, **kwargs)

    def put(self, store: Any, conversation: Conversation, claim: Claim, index: int, **kwargs: Any) -> bool:
        return store.put(
            conversation.pk,
            message_id=kwargs.get("message_id", claim.message_id),
            index=index,
            message=kwargs.get("message", {"role": "assistant", "text": "x" * index}),
            epoch=kwargs.get("epoch", claim.epoch),
        )

    # -- put and read -------------------------------------------------------------------------

    @pytest.mark.django_db
    def test_put_overwrites_the_one_record_of_the_conversation(self, store: Any) -> None:
        conversation = self.new_conversation()
        claim = self.start_turn(conversation)
        assert store.read(ALICE, conversation.pk) is None
        assert self.put(store, conversation, claim, 1)
        assert self.put(store, conversation, claim, 4, message={"text": "four", "at": timezone.now()})
        record = store.read(ALICE, conversation.pk)
        assert (record.message_id, record.index, record.epoch) == (claim.message_id, 4, 1)
        assert record.message["text"] == "four" and isinstance(record.message["at"], str)
        assert store.read_unscoped(str(conversation.pk)).index == 4

    @pytest.mark.django_db
    def test_read_follows_the_read_rules_and_never_leaks_existence(self, store: Any) -> None:
        private, shared = self.new_conversation(), self.new_conversation(shared=True)
        for conversation in (private, shared):
            self.put(store, conversation, self.start_turn(conversation), 2)
        assert store.read(BOB, shared.pk).index == 2
        for scope, conversation_id in [(BOB, private.pk), (MALLORY, shared.pk), (ALICE, uuid.uuid4()), (ALICE, "x")]:
            with pytest.raises(NotFound):
                store.read(scope, conversation_id)
        assert store.read_unscoped(uuid.uuid4()) is None

    @pytest.mark.django_db
    def test_a_new_turn_replaces_the_previous_turns_record(self, store: Any) -> None:
        conversation = self.new_conversation()
        old = self.start_turn(conversation)
        self.put(store, conversation, old, 9)
        new = self.start_turn(conversation, now=self.when_dead(conversation))
        assert self.put(store, conversation, new, 1)
        assert (self.record_of(conversation).message_id, self.record_of(conversation).index) == (new.message_id, 1)

    # -- fencing and the epoch guard ----------------------------------------------------------

    @pytest.mark.django_db
    def test_put_without_a_running_turn_is_fenced_and_writes_nothing(self, store: Any) -> None:
        conversation = self.new_conversation()
        with pytest.raises(Fenced):
            store.put(conversation.pk, message_id=uuid.uuid4(), index=1, message={}, epoch=1)
        assert self.record_of(conversation) is None

    @pytest.mark.django_db
    def test_a_stale_producers_put_is_fenced_and_writes_nothing(self, store: Any) -> None:
        conversation = self.new_conversation()
        old = self.start_turn(conversation)
        self.put(store, conversation, old, 3)
        new = self.start_turn(conversation, now=self.when_dead(conversation))
        self.put(store, conversation, new, 1)
        before = self.snapshot(conversation)
        with pytest.raises(Fenced) as refused:
            self.put(store, conversation, old, 4)
        assert refused.value.code == "fenced"
        assert self.snapshot(conversation) == before

    @pytest.mark.django_db
    @pytest.mark.parametrize(
        "arguments",
        [
            {"index": -1},
            {"index": True},
            {"index": "3"},
            {"message": ["not", "an", "object"]},
            {"message": {"text": float("nan")}},
            {"message": {"text": "nul\x00"}},
            {"message": {"text": {1, 2}}},
            {"message_id": "nope"},
            {"epoch": 0},
            {"epoch": None},
        ],
    )
    def test_put_refuses_bad_input_and_writes_nothing(self, store: Any, arguments: dict[str, Any]) -> None:
        conversation = self.new_conversation()
        claim = self.start_turn(conversation)
        with pytest.raises(Validation):
            store.put(
                conversation.pk,
                **{"message_id": claim.message_id, "index": 1, "message": {}, "epoch": claim.epoch, **arguments},
            )
        assert self.record_of(conversation) is None

    @pytest.mark.django_db
    def test_a_message_over_the_size_limit_is_storage_limit(self, store: Any) -> None:
        conversation = self.new_conversation()
        claim = self.start_turn(conversation)
        configured = getattr(settings, "AGENT_PERSISTENCE", {}) or {}
        with override_settings(AGENT_PERSISTENCE={**configured, "MAX_MESSAGE_BYTES": 100}):
            with pytest.raises(StorageLimit) as refused:
                self.put(store, conversation, claim, 1, message={"text": "x" * 200})
        assert refused.value.code == "too_large" and self.record_of(conversation) is None

    # -- put_many -----------------------------------------------------------------------------

    @pytest.mark.django_db
    def test_put_many_writes_the_held_records_and_reports_the_others(self, store: Any) -> None:
        live = [self.new_conversation() for _ in range(3)]
        claims = {c.pk: self.start_turn(c) for c in live}
        taken_over, never_claimed = self.new_conversation(), self.new_conversation()
        old = self.start_turn(taken_over)
        self.start_turn(taken_over, now=self.when_dead(taken_over))
        records = [flush_record(c.pk, claims[c.pk].message_id, 5, n=5) for c in live] + [
            flush_record(live[0].pk, claims[live[0].pk].message_id, 6, n=6),  # the later flush wins
            flush_record(taken_over.pk, old.message_id, 1),
            flush_record(str(never_claimed.pk), uuid.uuid4(), 1),
        ]
        not_written = store.put_many(records)
        assert not_written == {taken_over.pk, never_claimed.pk}
        assert (self.record_of(live[0]).index, self.record_of(live[0]).message) == (6, {"n": 6})
        assert self.record_of(live[1]).index == self.record_of(live[2]).index == 5
        assert self.record_of(taken_over) is None and self.record_of(never_claimed) is None
        assert store.put_many([]) == set()

    @pytest.mark.django_db
    def test_put_many_with_one_bad_record_writes_nothing(self, store: Any) -> None:
        conversation = self.new_conversation()
        claim = self.start_turn(conversation)
        good = flush_record(conversation.pk, claim.message_id, 1)
        for bad in [{**good, "index": -1}, {**good, "extra": 1}, {"conversation_id": conversation.pk}, "record"]:
            with pytest.raises(Validation):
                store.put_many([good, bad])
        assert self.record_of(conversation) is None

    # -- delete and purge ---------------------------------------------------------------------

    @pytest.mark.django_db
    def test_delete_removes_the_record_only_while_it_holds_the_message(self, store: Any) -> None:
        conversation = self.new_conversation()
        claim = self.start_turn(conversation)
        self.put(store, conversation, claim, 1)
        assert not store.delete(conversation.pk, message_id=uuid.uuid4())
        assert self.record_of(conversation) is not None
        assert store.delete(conversation.pk, message_id=claim.message_id)
        assert self.record_of(conversation) is None
        assert not store.delete(conversation.pk, message_id=claim.message_id)

    @pytest.mark.django_db
    def test_purge_deletes_old_records_of_finished_turns_oldest_first(self, store: Any) -> None:
        supervision = self.family.supervision
        now = timezone.now()
        conversations = {}
        ages = {"done old": 100, "done older": 200, "errored": 50, "no turn": 60, "alive": 300, "dead": 300}
        for name in ("done old", "done older", "errored", "no turn", "alive", "dead", "done recent"):
            conversation = conversations[name] = self.new_conversation()
            claim = self.start_turn(conversation)
            with frozen_clock(now - timedelta(seconds=ages.get(name, 0))):
                self.put(store, conversation, claim, 1)
            if name.startswith("done") or name == "errored":
                status = "errored" if name == "errored" else "done"
                supervision.finish(conversation.pk, epoch=claim.epoch, message_id=claim.message_id, status=status)
            elif name == "no turn":
                supervision.delete(conversation.pk, message_id=claim.message_id, epoch=claim.epoch)
        assert store.purge(finished_before=now - timedelta(seconds=10), limit=2) == 2
        assert self.record_of(conversations["done older"]) is None and self.record_of(conversations["done old"]) is None
        assert store.purge(finished_before=now - timedelta(seconds=10)) == 2
        kept = {name for name, conversation in conversations.items() if self.record_of(conversation) is not None}
        assert kept == {"alive", "dead", "done recent"}
        assert store.purge(finished_before=now - timedelta(seconds=10)) == 0

    @pytest.mark.django_db
    def test_async_twins_run_the_same_operations(self, store: Any) -> None:
        conversation = self.new_conversation()
        claim = self.start_turn(conversation)
        assert async_to_sync(store.aput)(conversation.pk, message_id=claim.message_id, index=2, message={}, epoch=1)
        assert async_to_sync(store.aread)(ALICE, conversation.pk).index == 2
        assert async_to_sync(store.adelete)(conversation.pk, message_id=claim.message_id)

    # -- races --------------------------------------------------------------------------------

    @pytest.mark.django_db(transaction=True)
    def test_a_reader_racing_the_writer_never_sees_a_torn_record(self, store: Any) -> None:
        conversation = self.new_conversation()
        claim = self.start_turn(conversation)
        writing = threading.Event()
        writing.set()

        # A fast store can write all 300 before a reader is scheduled: the writer waits after its
        # first put until every reader has seen a record, so each reads while the rest is written.
        first_seen = threading.Barrier(4)

        def write() -> int:
            try:
                for index in range(1, 301):
                    self.put(store, conversation, claim, index, message={"text": "x" * index, "index": index})
                    if index == 1:
                        first_seen.wait(30)
                return 300
            finally:
                writing.clear()

        def read() -> list[tuple[int, int, int]]:
            seen: list[tuple[int, int, int]] = []
            while writing.is_set():
                record = store.read(ALICE, conversation.pk)
                if record is not None:
                    seen.append((record.index, len(record.message["text"]), record.message["index"]))
                    if len(seen) == 1:
                        first_seen.wait(30)
            return seen

        results = run_in_threads(4, lambda i: write() if i == 0 else read())
        assert results[0] == 300, results[0]
        for seen in results[1:]:
            assert isinstance(seen, list), seen
            assert all(index == length == inner for index, length, inner in seen)
            assert [index for index, _, _ in seen] == sorted(index for index, _, _ in seen)
        assert all(seen for seen in results[1:])
        assert self.record_of(conversation).index == 300

    @pytest.mark.django_db(transaction=True)
    def test_after_a_takeover_the_old_producer_never_overwrites_the_new_record(self, store: Any) -> None:
        conversation = self.new_conversation()
        old = self.start_turn(conversation)

        def old_producer() -> str:
            deadline, index = time.monotonic() + 20, 0
            while time.monotonic() < deadline:
                index += 1
                try:
                    self.put(store, conversation, old, index)
                except Fenced:
                    return "fenced"
                time.sleep(0.001)
            return "never fenced"

        def new_producer() -> Claim:
            time.sleep(0.1)
            new = self.start_turn(conversation, now=timezone.now() + timedelta(seconds=60))
            for index in range(1, 21):
                self.put(store, conversation, new, index, message={"text": "new" * index})
            return new

        result, new = run_in_threads(2, lambda i: old_producer() if i == 0 else new_producer())
        assert result == "fenced"
        record = self.record_of(conversation)
        assert (record.message_id, record.epoch, record.index) == (new.message_id, new.epoch, 20)
