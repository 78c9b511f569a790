"""The contract of a checkpoint store.

Subclass :class:`CheckpointStoreContract` and override ``make_stores()`` (the
family: the checkpoints are fenced by its supervision store) or ``make_store()``
to run it against your backend. It asserts through the store API only.
"""

from __future__ import annotations

import datetime
import json
import time
import uuid
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
from .family import FamilyContract


def max_state_bytes(limit: int) -> Any:
    configured = getattr(settings, "AGENT_PERSISTENCE", {}) or {}
    return override_settings(AGENT_PERSISTENCE={**configured, "MAX_STATE_BYTES": limit})


class CheckpointStoreContract(FamilyContract):
    """Whole-blob, fenced, size-limited: the agent checkpoint of a conversation."""

    def make_store(self) -> Any:
        return self.family.checkpoints

    @pytest.fixture
    def store(self, stores: Any) -> Any:
        return self.make_store()

    def checkpoint_of(self, conversation: Any) -> Any:
        return self.family.checkpoints.read(conversation.pk)

    def snapshot(self, conversation: Any) -> tuple[Any, ...] | None:
        row = self.checkpoint_of(conversation)
        return None if row is None else (row.state, row.size, row.message_id, row.epoch, row.saved_at)

    def start_turn(self, conversation: Conversation, **kwargs: Any) -> Claim:
        kwargs.setdefault("message_id", uuid.uuid4())
        return self.family.supervision.claim(ALICE, conversation.pk, **kwargs)

    # -- batched saves (one transaction per supervisor tick) ---------------------------------

    @pytest.mark.django_db
    def test_save_many_saves_every_live_turn_and_reports_the_fenced_ones(self, store: Any) -> None:
        live, fenced, stale = self.new_conversation(), self.new_conversation(), self.new_conversation()
        live_claim, fenced_claim, stale_claim = self.start_turn(live), self.start_turn(fenced), self.start_turn(stale)
        self.family.supervision.force_release(fenced.pk)
        unsaved = store.save_many(
            [
                {"conversation_id": live.pk, "state": {"n": 1}, "epoch": live_claim.epoch, "message_id": live_claim.message_id},
                {"conversation_id": fenced.pk, "state": {"n": 2}, "epoch": fenced_claim.epoch},
                {"conversation_id": stale.pk, "state": {"n": 3}, "epoch": stale_claim.epoch + 1},
            ]
        )
        assert unsaved == {fenced.pk, stale.pk}
        assert store.load(live.pk) == {"n": 1} and self.checkpoint_of(live).message_id == live_claim.message_id
        assert self.checkpoint_of(fenced) is None and self.checkpoint_of(stale) is None

    @pytest.mark.django_db
    def test_save_many_writes_nothing_when_one_state_is_too_large(self, store: Any) -> None:
        small, large = self.new_conversation(), self.new_conversation()
        small_claim, large_claim = self.start_turn(small), self.start_turn(large)
        with max_state_bytes(100), pytest.raises(StorageLimit):
            store.save_many(
                [
                    {"conversation_id": small.pk, "state": {"n": 1}, "epoch": small_claim.epoch},
                    {"conversation_id": large.pk, "state": {"blob": "x" * 200}, "epoch": large_claim.epoch},
                ]
            )
        assert self.checkpoint_of(small) is None and self.checkpoint_of(large) is None

    # -- load and save ------------------------------------------------------------------------

    @pytest.mark.django_db
    def test_load_is_empty_when_nothing_was_saved(self, store: Any) -> None:
        conversation = self.new_conversation()
        assert store.load(conversation.pk) == {} and store.load(uuid.uuid4()) == {}
        assert store.load_for(ALICE, conversation.pk) == {}

    @pytest.mark.django_db
    def test_save_replaces_the_whole_state(self, store: Any) -> None:
        conversation = self.new_conversation()
        claim = self.start_turn(conversation)
        store.save(conversation.pk, {"tools": {"done": [1, 2]}, "memory": {"notes": "a"}}, epoch=claim.epoch)
        store.save(conversation.pk, {"tools": {"done": [1, 2, 3]}}, epoch=claim.epoch, message_id=claim.message_id)
        assert store.load(conversation.pk) == {"tools": {"done": [1, 2, 3]}}
        row = self.checkpoint_of(conversation)
        assert (row.message_id, row.epoch) == (claim.message_id, 1)

    @pytest.mark.django_db
    def test_save_stores_what_json_round_tripping_gives_and_its_utf8_size(self, store: Any) -> None:
        conversation = self.new_conversation()
        claim = self.start_turn(conversation)
        moment = datetime.datetime(2030, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)
        state = {"agent": {"at": moment, "pair": (1, 2), "text": "héllo ✓", "nothing": None, "json": '{"a": 1}'}}
        store.save(conversation.pk, state, epoch=claim.epoch)
        loaded = store.load(conversation.pk)
        expected = {
            "agent": {"at": "2030-01-02T03:04:05Z", "pair": [1, 2], "text": "héllo ✓", "nothing": None, "json": '{"a": 1}'}
        }
        assert loaded == expected
        compact = json.dumps(expected, ensure_ascii=False, separators=(",", ":"))
        assert self.checkpoint_of(conversation).size == len(compact.encode("utf-8")) > len(compact)

    @pytest.mark.django_db
    def test_load_for_follows_the_read_rules_and_never_leaks_existence(self, store: Any) -> None:
        private, shared = self.new_conversation(), self.new_conversation(shared=True)
        for conversation in (private, shared):
            store.save(conversation.pk, {"k": 1}, epoch=self.start_turn(conversation).epoch)
        assert store.load_for(BOB, shared.pk) == {"k": 1}
        for scope, conversation_id in [(BOB, private.pk), (MALLORY, shared.pk), (ALICE, uuid.uuid4()), (ALICE, "x")]:
            with pytest.raises(NotFound):
                store.load_for(scope, conversation_id)

    # -- limits and bad input -----------------------------------------------------------------

    @pytest.mark.django_db
    def test_a_state_over_the_size_limit_is_storage_limit_and_writes_nothing(self, store: Any) -> None:
        conversation = self.new_conversation()
        claim = self.start_turn(conversation)
        fits = {"k": "é" * 10}  # {"k":"éééééééééé"}: 8 + 20 bytes
        with max_state_bytes(28):
            store.save(conversation.pk, fits, epoch=claim.epoch)
            assert self.checkpoint_of(conversation).size == 28
            store.save(conversation.pk, {"kept": True}, epoch=claim.epoch)
            before = self.snapshot(conversation)
            with pytest.raises(StorageLimit) as refused:
                store.save(conversation.pk, {"k": "é" * 11}, epoch=claim.epoch)
        assert refused.value.code == "too_large" and refused.value.details["limit"] == 28
        assert self.snapshot(conversation) == before

    @pytest.mark.django_db
    @pytest.mark.parametrize(
        "state",
        [["a", "list"], "text", None, {"k": {1, 2}}, {"k": float("inf")}, {"k": object()}, {"k": "nul\x00"}],
        ids=["list", "text", "none", "set", "inf", "object", "NUL"],
    )
    def test_a_state_that_is_not_a_json_object_is_validation(self, store: Any, state: Any) -> None:
        conversation = self.new_conversation()
        claim = self.start_turn(conversation)
        with pytest.raises(Validation):
            store.save(conversation.pk, state, epoch=claim.epoch)
        assert self.checkpoint_of(conversation) is None

    @pytest.mark.django_db
    def test_bad_ids_and_epochs_are_refused(self, store: Any) -> None:
        conversation = self.new_conversation()
        claim = self.start_turn(conversation)
        for arguments in [{"epoch": 0}, {"epoch": "1"}, {"epoch": None}, {"message_id": "x"}]:
            with pytest.raises(Validation):
                store.save(conversation.pk, {}, **{"epoch": claim.epoch, **arguments})
        with pytest.raises(NotFound):
            store.save("not-a-uuid", {}, epoch=1)
        assert self.checkpoint_of(conversation) is None

    # -- fencing ------------------------------------------------------------------------------

    @pytest.mark.django_db
    @pytest.mark.parametrize("situation", ["no turn", "taken over", "finished", "released", "unknown conversation"])
    def test_a_stale_save_is_fenced_and_writes_nothing(self, store: Any, situation: str) -> None:
        conversation = self.new_conversation()
        supervision = self.family.supervision
        conversation_id = uuid.uuid4() if situation == "unknown conversation" else conversation.pk
        if situation not in ("no turn", "unknown conversation"):
            old = self.start_turn(conversation)
            store.save(conversation.pk, {"by": "old"}, epoch=old.epoch)
            if situation == "taken over":
                new = self.start_turn(conversation, now=self.when_dead(conversation))
                store.save(conversation.pk, {"by": "new"}, epoch=new.epoch)
            elif situation == "finished":
                supervision.finish(conversation.pk, epoch=old.epoch, message_id=old.message_id, status="done")
            else:
                supervision.force_release(conversation.pk)
        before = self.snapshot(conversation)
        with pytest.raises(Fenced) as refused:
            store.save(conversation_id, {"by": "stale"}, epoch=1)
        assert refused.value.code == "fenced"
        assert self.snapshot(conversation) == before

    # -- delete -------------------------------------------------------------------------------

    @pytest.mark.django_db
    def test_delete_forgets_the_state_and_is_a_no_op_without_one(self, store: Any) -> None:
        conversation = self.new_conversation()
        store.delete(conversation.pk)
        store.save(conversation.pk, {"k": 1}, epoch=self.start_turn(conversation).epoch)
        store.delete(conversation.pk)
        assert store.load(conversation.pk) == {} and self.checkpoint_of(conversation) is None

    @pytest.mark.django_db
    def test_async_twins_run_the_same_operations(self, store: Any) -> None:
        conversation = self.new_conversation()
        claim = self.start_turn(conversation)
        async_to_sync(store.asave)(conversation.pk, {"k": 1}, epoch=claim.epoch)
        assert async_to_sync(store.aload)(conversation.pk) == {"k": 1}
        assert async_to_sync(store.aload_for)(ALICE, conversation.pk) == {"k": 1}
        async_to_sync(store.adelete)(conversation.pk)
        assert store.load(conversation.pk) == {}

    # -- races --------------------------------------------------------------------------------

    @pytest.mark.django_db(transaction=True)
    def test_concurrent_saves_leave_one_whole_state(self, store: Any) -> None:
        conversation = self.new_conversation()
        claim = self.start_turn(conversation)

        def save(index: int) -> None:
            store.save(conversation.pk, {f"writer {index}": {"items": [index] * 50}}, epoch=claim.epoch)

        assert run_in_threads(10, save) == [None] * 10
        (key, value), = store.load(conversation.pk).items()
        assert value == {"items": [int(key.split()[1])] * 50}

    @pytest.mark.django_db(transaction=True)
    def test_after_a_takeover_the_old_producer_never_overwrites_the_new_state(self, store: Any) -> None:
        conversation = self.new_conversation()
        old = self.start_turn(conversation)

        def old_producer() -> str:
            deadline, saves = time.monotonic() + 20, 0
            while time.monotonic() < deadline:
                saves += 1
                try:
                    store.save(conversation.pk, {"by": "old", "saves": saves}, epoch=old.epoch)
                except Fenced:
                    return "fenced"
                time.sleep(0.001)
            return "never fenced"

        def new_producer() -> Claim:
            time.sleep(0.1)
            new = self.start_turn(conversation, now=timezone.now() + datetime.timedelta(seconds=60))
            store.save(conversation.pk, {"by": "new"}, epoch=new.epoch)
            return new

        result, new = run_in_threads(2, lambda i: old_producer() if i == 0 else new_producer())
        assert result == "fenced"
        assert store.load(conversation.pk) == {"by": "new"} and self.checkpoint_of(conversation).epoch == new.epoch
