"""The contract of a run store: every rule of :class:`~agent_persistence.stores.runs.RunStore`.

Subclass :class:`RunStoreContract` and override ``make_stores()`` (the family)
or ``make_store()`` to run it against another backend. Conversations and
supervision claims are set up through the family's other stores, and the suite
asserts through the store API only; races run in real threads (and forked
processes, for a family whose state they share) on committed data.
"""

from __future__ import annotations

import functools
import uuid
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.utils import timezone

from ..conf import app_settings
from ..exceptions import Conflict, ConversationNotOwned, Fenced, NotFound, StorageLimit, Validation
from ..ids import uuid7
from ..models import Conversation, Run
from ..scope import Scope
from ..stores.runs import DEFAULT_ERROR_CODE
from .actors import ALICE, BOB, MALLORY
from .concurrency import run_in_threads
from .family import FamilyContract, caught_not_found, check_cursor_walks, frozen_clock, record_of

OWNER, READER, STRANGER = ALICE, BOB, MALLORY  # the owner, another user of her tenant, another tenant


class RunStoreContract(FamilyContract):
    """The behaviour every run store must have, on every database it supports."""

    #: Rounds of each race; enough that a store without its conditional writes loses one.
    RACE_ROUNDS = 4
    RACE_THREADS = 8

    def make_store(self) -> Any:
        return self.family.runs

    @pytest.fixture
    def store(self, stores: Any) -> Any:
        return self.make_store()

    def stored(self, run: Run, scope: Scope = OWNER) -> dict[str, Any]:
        """Every field of the run as the store holds it now."""
        return record_of(self.family.runs.get(scope, run.pk))

    def run_count(self, *conversations: Conversation, scope: Scope = OWNER) -> int:
        return sum(self.family.runs.list(scope, conversation.pk).total for conversation in conversations)

    def start_run(self, store: Any, conversation: Conversation, **options: Any) -> Run:
        options.setdefault("message_id", uuid7())
        return store.create_or_resume(OWNER, conversation.pk, id=options.pop("id", uuid7()), **options)

    def start_run_at(self, store: Any, conversation: Conversation, started_at: Any, **options: Any) -> Run:
        """A run started at ``started_at`` (the clock is frozen there while it is created)."""
        with frozen_clock(started_at):
            return self.start_run(store, conversation, **options)

    # -- create_or_resume -------------------------------------------------------------------

    @pytest.mark.django_db
    def test_create_inserts_a_running_run_with_its_epoch(self, store: Any) -> None:
        conversation = self.new_conversation()
        self.claim_epoch(conversation, 3)
        run_id, turn_id = uuid7(), uuid7()
        run = store.create_or_resume(OWNER, conversation.pk, id=run_id, message_id=turn_id, name="planner", epoch=3)
        assert (run.pk, run.conversation_id, run.message_id, run.name) == (run_id, conversation.pk, turn_id, "planner")
        row = self.stored(run)
        assert row["status"] == "running" and row["epoch"] == 3
        assert row["finished_at"] is None and row["error"] is None and row["detached_since"] is None
        assert row["usage"] == {} and row["cancel_requested"] is False and row["parent_id"] is None

    @pytest.mark.django_db
    def test_create_accepts_ids_as_text(self, store: Any) -> None:
        conversation = self.new_conversation()
        run_id = uuid7()
        run = store.create_or_resume(OWNER, str(conversation.pk), id=str(run_id), message_id=str(uuid7()))
        assert run.pk == run_id and run.epoch == 0

    @pytest.mark.django_db
    def test_second_call_returns_the_original_unchanged(self, store: Any) -> None:
        conversation = self.new_conversation()
        first = self.start_run(store, conversation, name="first")
        again = store.create_or_resume(OWNER, conversation.pk, id=first.pk, message_id=uuid7(), name="second")
        assert again.pk == first.pk
        assert (again.name, again.message_id, again.started_at) == ("first", first.message_id, first.started_at)
        assert self.stored(first)["name"] == "first"
        assert self.run_count(conversation) == 1

    @pytest.mark.django_db
    def test_a_finished_run_is_never_resurrected(self, store: Any) -> None:
        conversation = self.new_conversation()
        for status in ("completed", "failed", "aborted"):
            run = self.start_run(store, conversation)
            store.finish(OWNER, run.pk, status)
            again = store.create_or_resume(OWNER, conversation.pk, id=run.pk, message_id=run.message_id)
            assert again.status == status and again.finished_at is not None
            assert self.stored(run)["status"] == status

    @pytest.mark.django_db
    def test_an_interrupted_run_stays_interrupted_when_resumed_by_id(self, store: Any) -> None:
        conversation = self.new_conversation()
        run = self.start_run(store, conversation)
        store.set_status(OWNER, run.pk, "interrupted")
        again = store.create_or_resume(OWNER, conversation.pk, id=run.pk, message_id=run.message_id)
        assert again.status == "interrupted"

    @pytest.mark.django_db
    def test_an_id_of_another_conversation_is_a_conflict(self, store: Any) -> None:
        mine, theirs = self.new_conversation(), self.new_conversation(STRANGER)
        run = store.create_or_resume(STRANGER, theirs.pk, id=uuid7(), message_id=uuid7())
        with pytest.raises(Conflict) as caught:
            store.create_or_resume(OWNER, mine.pk, id=run.pk, message_id=uuid7())
        assert caught.value.code == "run_id_taken"
        assert self.stored(run, STRANGER)["conversation_id"] == theirs.pk
        assert self.run_count(mine) == 0

    @pytest.mark.django_db
    def test_a_child_run_links_to_its_parent_of_the_same_conversation(self, store: Any) -> None:
        conversation, other = self.new_conversation(), self.new_conversation()
        parent = self.start_run(store, conversation)
        child = self.start_run(store, conversation, parent_id=parent.pk, name="researcher")
        assert child.parent_id == parent.pk
        foreign = self.start_run(store, other)
        for parent_id in (foreign.pk, uuid7(), "not-a-uuid"):
            with pytest.raises(NotFound) as caught:
                self.start_run(store, conversation, parent_id=parent_id)
            assert caught.value.code == "run_not_found"
        assert self.run_count(conversation, other) == 3

    @pytest.mark.django_db
    def test_only_the_owner_creates_runs(self, store: Any) -> None:
        shared = self.new_conversation(shared=True)
        private = self.new_conversation()
        with pytest.raises(ConversationNotOwned):
            store.create_or_resume(READER, shared.pk, id=uuid7(), message_id=uuid7())
        for scope, conversation in ((READER, private), (STRANGER, shared), (STRANGER, private)):
            with pytest.raises(NotFound):
                store.create_or_resume(scope, conversation.pk, id=uuid7(), message_id=uuid7())
        with pytest.raises(NotFound):
            store.create_or_resume(OWNER, uuid7(), id=uuid7(), message_id=uuid7())
        assert self.run_count(shared, private) == 0

    @pytest.mark.django_db
    @pytest.mark.parametrize(
        "bad",
        [
            {"id": "not-a-uuid"},
            {"id": None},
            {"message_id": 12},
            {"name": "x" * 256},
            {"name": "nul\x00byte"},
            {"name": None},
            {"epoch": -1},
            {"epoch": "1"},
            {"epoch": True},
            {"epoch": 2**64},
        ],
    )
    def test_bad_input_is_validation_and_writes_nothing(self, store: Any, bad: dict[str, Any]) -> None:
        conversation = self.new_conversation()
        self.claim_epoch(conversation, 1)
        arguments = {"id": uuid7(), "message_id": uuid7(), **bad}
        with pytest.raises(Validation):
            store.create_or_resume(OWNER, conversation.pk, **arguments)
        assert self.run_count(conversation) == 0

    @pytest.mark.django_db
    def test_create_with_a_stale_epoch_is_fenced_and_writes_nothing(self, store: Any) -> None:
        conversation = self.new_conversation()
        with pytest.raises(Fenced):  # nobody has claimed the conversation
            self.start_run(store, conversation, epoch=1)
        self.claim_epoch(conversation, 2)
        with pytest.raises(Fenced):
            self.start_run(store, conversation, epoch=1)
        row = self.row_of(conversation)
        assert self.family.supervision.finish(conversation.pk, epoch=2, message_id=row.message_id, status="done")
        with pytest.raises(Fenced):  # a finished turn no longer holds the conversation
            self.start_run(store, conversation, epoch=2)
        assert self.run_count(conversation) == 0

    @pytest.mark.django_db(transaction=True)
    def test_concurrent_creates_of_one_id_insert_one_row_and_agree(self, store: Any) -> None:
        conversation = self.new_conversation()
        for _ in range(self.RACE_ROUNDS):
            run_id, turn_id = uuid7(), uuid7()

            def create(index: int) -> tuple[uuid.UUID, str]:
                run = store.create_or_resume(OWNER, conversation.pk, id=run_id, message_id=turn_id, name=f"n{index}")
                return run.pk, run.name

            outcomes = run_in_threads(self.RACE_THREADS, create)
            assert not [o for o in outcomes if isinstance(o, BaseException)], outcomes
            assert len(set(outcomes)) == 1  # every caller got the winner's row
            assert store.get(OWNER, run_id).name == outcomes[0][1]

    # -- reading ----------------------------------------------------------------------------

    @pytest.mark.django_db
    def test_get_follows_the_conversation_read_rule(self, store: Any) -> None:
        shared, private = self.new_conversation(shared=True), self.new_conversation()
        shared_run, private_run = self.start_run(store, shared), self.start_run(store, private)
        assert store.get(OWNER, private_run.pk).pk == private_run.pk
        assert store.get(READER, str(shared_run.pk)).pk == shared_run.pk
        for scope, run_id in ((READER, private_run.pk), (STRANGER, shared_run.pk), (OWNER, uuid7()), (OWNER, "x")):
            with pytest.raises(NotFound) as caught:
                store.get(scope, run_id)
            assert caught.value.code == "run_not_found"

    @pytest.mark.django_db
    def test_find_active_run_returns_the_newest_running_run(self, store: Any) -> None:
        conversation = self.new_conversation()
        assert store.find_active_run(OWNER, conversation.pk) is None
        now = timezone.now()
        older, newer, parked, done = (self.start_run_at(store, conversation, now + timedelta(seconds=offset)) for offset in range(4))
        store.set_status(OWNER, parked.pk, "interrupted")
        store.finish(OWNER, done.pk, "completed")
        assert store.find_active_run(OWNER, conversation.pk).pk == newer.pk
        # Same start: the larger id is the newer one.
        twin = self.start_run_at(store, conversation, now + timedelta(seconds=1), id=uuid.UUID(int=newer.pk.int + 1))
        assert store.find_active_run(OWNER, conversation.pk).pk == twin.pk
        with pytest.raises(NotFound):
            store.find_active_run(STRANGER, conversation.pk)

    @pytest.mark.django_db
    def test_list_pages_the_runs_newest_first_and_filters_by_turn(self, store: Any) -> None:
        conversation, other = self.new_conversation(), self.new_conversation()
        turn = uuid7()
        now = timezone.now()
        runs = [
            self.start_run_at(store, conversation, now + timedelta(seconds=i), message_id=turn if i % 2 else uuid7())
            for i in range(5)
        ]
        self.start_run(store, other)
        page = store.list(OWNER, conversation.pk, limit=2, offset=1)
        assert [r.pk for r in page.items] == [runs[3].pk, runs[2].pk]
        assert (page.total, page.limit, page.offset, page.has_more) == (5, 2, 1, True)
        turn_page = store.list(OWNER, conversation.pk, message_id=str(turn))
        assert [r.pk for r in turn_page.items] == [runs[3].pk, runs[1].pk] and not turn_page.has_more
        with pytest.raises(Validation):
            store.list(OWNER, conversation.pk, limit=0)
        with pytest.raises(Validation):
            store.list(OWNER, conversation.pk, message_id="nope")
        with pytest.raises(NotFound):
            store.list(READER, conversation.pk)

    def runs_with_ties(self, store: Any, conversation: Conversation, **options: Any) -> list[Run]:
        """Six runs of the conversation, three started in one instant and created out of id order; in listing key order."""
        now = timezone.now()
        tied = sorted(uuid7() for _ in range(3))
        runs = [
            self.start_run_at(store, conversation, now + timedelta(seconds=offset), **({"id": run_id} if run_id else {}), **options)
            for offset, run_id in ((0, tied[2]), (-5, None), (0, tied[0]), (5, None), (0, tied[1]), (-9, None))
        ]
        return sorted(runs, key=lambda run: (run.started_at, run.pk))

    @pytest.mark.django_db
    def test_cursor_walks_read_every_run_once_in_order_both_ways(self, store: Any) -> None:
        conversation = self.new_conversation()
        oldest_first = [run.pk for run in self.runs_with_ties(store, conversation)]
        self.start_run(store, self.new_conversation())  # another conversation's run is never read
        read_page = functools.partial(store.list, OWNER, conversation.pk)
        check_cursor_walks(read_page, oldest_first)

    @pytest.mark.django_db
    def test_run_cursors_are_strict_by_started_at_then_id_whatever_the_order(self, store: Any) -> None:
        conversation = self.new_conversation()
        runs = self.runs_with_ties(store, conversation)
        ids = [run.pk for run in runs]
        assert runs[2].started_at == runs[3].started_at == runs[4].started_at  # ids decide among these three
        pages = {
            "before, newest first": store.list(OWNER, conversation.pk, before=ids[3]),
            "before, oldest first": store.list(OWNER, conversation.pk, before=str(ids[3]), order="asc"),
            "after": store.list(OWNER, conversation.pk, after=ids[3], order="asc"),
            "after, newest first": store.list(OWNER, conversation.pk, after=ids[2]),
            "between": store.list(OWNER, conversation.pk, after=ids[1], before=ids[4], order="asc"),
            "with offset": store.list(OWNER, conversation.pk, before=ids[4], limit=2, offset=1),
            "past the end": store.list(OWNER, conversation.pk, after=ids[5]),
        }
        assert {name: ([run.pk for run in page.items], page.total, page.has_more) for name, page in pages.items()} == {
            "before, newest first": ([ids[2], ids[1], ids[0]], None, False),
            "before, oldest first": (ids[:3], None, False),
            "after": (ids[4:], None, False),
            "after, newest first": ([ids[5], ids[4], ids[3]], None, False),
            "between": (ids[2:4], None, False),
            "with offset": ([ids[2], ids[1]], None, True),
            "past the end": ([], None, False),
        }
        counted = store.list(OWNER, conversation.pk, before=ids[3], limit=2, with_total=True)
        assert ([run.pk for run in counted.items], counted.total, counted.has_more) == ([ids[2], ids[1]], 3, True)
        assert store.list(OWNER, conversation.pk, with_total=False).total is None
        with pytest.raises(Validation):
            store.list(OWNER, conversation.pk, order="newest")

    @pytest.mark.django_db
    def test_a_run_cursor_outside_the_listing_or_the_scope_is_not_found(self, store: Any) -> None:
        shared, private = self.new_conversation(shared=True), self.new_conversation()
        now, turn = timezone.now(), uuid7()
        first = self.start_run_at(store, shared, now, message_id=turn)
        other_turn = self.start_run_at(store, shared, now + timedelta(seconds=1))
        foreign, private_run = self.start_run(store, private), self.start_run(store, private)
        for cursor in (foreign.pk, uuid7(), "nope", 5):
            for direction in ("before", "after"):
                for with_total in (None, True, False):
                    with pytest.raises(NotFound):
                        store.list(OWNER, shared.pk, with_total=with_total, **{direction: cursor})
        with pytest.raises(NotFound):
            store.list(OWNER, shared.pk, message_id=turn, before=other_turn.pk)  # a run of another turn
        unknown_conversation = caught_not_found(lambda: store.list(OWNER, uuid7(), before=first.pk))
        for scope, conversation, cursor in ((STRANGER, shared, first), (READER, private, private_run)):
            for with_total in (None, True):
                # Answered exactly as for a conversation nobody holds: existence never leaks.
                refused = caught_not_found(lambda: store.list(scope, conversation.pk, after=cursor.pk, with_total=with_total))
                assert refused == unknown_conversation, (scope, with_total)
        assert [run.pk for run in store.list(READER, shared.pk, after=first.pk).items] == [other_turn.pk]
        assert [run.pk for run in store.list(OWNER, shared.pk, message_id=turn, after=first.pk).items] == []

    @pytest.mark.django_db
    def test_children_are_the_subagent_runs_oldest_first(self, store: Any) -> None:
        conversation = self.new_conversation(shared=True)
        parent = self.start_run(store, conversation)
        now = timezone.now()
        kids = [
            self.start_run_at(store, conversation, now + timedelta(seconds=offset), parent_id=parent.pk, name=f"kid{i}")
            for i, offset in enumerate((2, 0, 1))
        ]
        self.start_run(store, conversation, parent_id=kids[0].pk)  # a grandchild is not a child
        assert [r.pk for r in store.children(READER, parent.pk)] == [kids[1].pk, kids[2].pk, kids[0].pk]
        assert store.children(OWNER, kids[1].pk) == []
        with pytest.raises(NotFound):
            store.children(STRANGER, parent.pk)

    # -- usage ------------------------------------------------------------------------------

    @pytest.mark.django_db
    def test_add_usage_accumulates_counters_across_calls(self, store: Any) -> None:
        conversation = self.new_conversation()
        run = self.start_run(store, conversation)
        store.add_usage(OWNER, run.pk, {"input_tokens": 10, "output_tokens": 5})
        store.add_usage(OWNER, run.pk, {"input_tokens": 7, "cost": 0.25})
        run = store.add_usage(OWNER, run.pk, {"cost": 0.5})
        assert run.usage == {"input_tokens": 17, "output_tokens": 5, "cost": 0.75}
        assert self.stored(run)["usage"] == run.usage

    @pytest.mark.django_db
    def test_set_usage_writes_absolute_totals(self, store: Any) -> None:
        """TanStack's middleware writes cumulative totals: the same total written twice counts once."""
        run = self.start_run(store, self.new_conversation())
        store.add_usage(OWNER, run.pk, {"input_tokens": 3, "cache_reads": 1})
        totals = {"input_tokens": 10, "output_tokens": 4}
        assert store.set_usage(OWNER, run.pk, totals).usage == totals
        assert store.set_usage(OWNER, str(run.pk), totals).usage == totals
        assert self.stored(run)["usage"] == totals
        assert store.add_usage(OWNER, run.pk, {"output_tokens": 1}).usage == {"input_tokens": 10, "output_tokens": 5}
        assert async_to_sync(store.aset_usage)(OWNER, run.pk, {"input_tokens": 12}).usage == {"input_tokens": 12}
        assert store.set_usage(OWNER, run.pk, {}).usage == {}

    @pytest.mark.django_db
    @pytest.mark.parametrize(
        "usage",
        [None, [], {"tokens": "3"}, {"tokens": True}, {"tokens": -1}, {"tokens": float("nan")}, {"tokens": 2**63},
         {"tok\x00ens": 1}],
    )
    def test_set_usage_refuses_what_is_not_counters(self, store: Any, usage: Any) -> None:
        run = self.start_run(store, self.new_conversation())
        store.set_usage(OWNER, run.pk, {"tokens": 1})
        with pytest.raises(Validation) as caught:
            store.set_usage(OWNER, run.pk, usage)
        assert caught.value.details.get("field") == "usage"
        assert self.stored(run)["usage"] == {"tokens": 1}

    @pytest.mark.django_db
    def test_set_usage_is_the_owners_fenced_and_refused_on_a_finished_run(self, store: Any) -> None:
        conversation = self.new_conversation(shared=True)
        self.claim_epoch(conversation, 1)
        run = self.start_run(store, conversation, epoch=1)
        with pytest.raises(ConversationNotOwned):
            store.set_usage(READER, run.pk, {"tokens": 9})
        with pytest.raises(NotFound):
            store.set_usage(STRANGER, run.pk, {"tokens": 9})
        with pytest.raises(NotFound):
            store.set_usage(OWNER, uuid7(), {"tokens": 9})
        store.set_usage(OWNER, run.pk, {"tokens": 2}, epoch=1)
        self.claim_epoch(conversation, 2)
        with pytest.raises(Fenced):
            store.set_usage(OWNER, run.pk, {"tokens": 9}, epoch=1)
        store.finish(OWNER, run.pk, "completed", epoch=2)
        with pytest.raises(Conflict) as caught:
            store.set_usage(OWNER, run.pk, {"tokens": 9}, epoch=2)
        assert caught.value.code == "run_finished"
        assert self.stored(run)["usage"] == {"tokens": 2}

    @pytest.mark.django_db
    @pytest.mark.parametrize(
        "usage",
        [None, [], {"tokens": "3"}, {"tokens": True}, {"tokens": float("nan")}, {"tokens": float("inf")},
         {"tokens": -1}, {1: 2}, {"tok\x00ens": 1}, {"tokens": None}, {"tokens": {"nested": 1}}],
    )
    def test_add_usage_refuses_what_is_not_counters(self, store: Any, usage: Any) -> None:
        run = self.start_run(store, self.new_conversation())
        store.add_usage(OWNER, run.pk, {"tokens": 1})
        with pytest.raises(Validation):
            store.add_usage(OWNER, run.pk, usage)
        assert self.stored(run)["usage"] == {"tokens": 1}

    @pytest.mark.django_db
    def test_add_usage_on_a_finished_run_is_a_conflict_and_keeps_its_usage(self, store: Any) -> None:
        run = self.start_run(store, self.new_conversation())
        store.add_usage(OWNER, run.pk, {"tokens": 4})
        store.finish(OWNER, run.pk, "failed", error={"message": "boom", "code": "model_error"})
        with pytest.raises(Conflict) as caught:
            store.add_usage(OWNER, run.pk, {"tokens": 1})
        assert caught.value.code == "run_finished"
        assert self.stored(run)["usage"] == {"tokens": 4}

    @pytest.mark.django_db
    def test_add_usage_is_the_owners_and_fenced(self, store: Any) -> None:
        conversation = self.new_conversation(shared=True)
        self.claim_epoch(conversation, 1)
        run = self.start_run(store, conversation, epoch=1)
        with pytest.raises(ConversationNotOwned):
            store.add_usage(READER, run.pk, {"tokens": 1})
        with pytest.raises(NotFound):
            store.add_usage(STRANGER, run.pk, {"tokens": 1})
        store.add_usage(OWNER, run.pk, {"tokens": 1}, epoch=1)
        self.claim_epoch(conversation, 2)
        with pytest.raises(Fenced):
            store.add_usage(OWNER, run.pk, {"tokens": 1}, epoch=1)
        assert self.stored(run)["usage"] == {"tokens": 1}

    @pytest.mark.django_db(transaction=True)
    def test_concurrent_add_usage_loses_nothing(self, store: Any) -> None:
        calls_per_thread = 5
        for _ in range(self.RACE_ROUNDS):
            run = self.start_run(store, self.new_conversation())

            def add(index: int) -> None:
                for _ in range(calls_per_thread):
                    store.add_usage(OWNER, run.pk, {"tokens": 1, f"thread{index}": 2})

            outcomes = run_in_threads(self.RACE_THREADS, add)
            assert outcomes == [None] * self.RACE_THREADS
            usage = self.stored(run)["usage"]
            assert usage["tokens"] == self.RACE_THREADS * calls_per_thread
            assert all(usage[f"thread{i}"] == 2 * calls_per_thread for i in range(self.RACE_THREADS))

    @pytest.mark.django_db(transaction=True)
    def test_add_usage_from_several_processes_loses_nothing(self, store: Any) -> None:
        run = self.start_run(store, self.new_conversation())
        processes, calls = 4, 5

        def add(index: int) -> int:
            for _ in range(calls):
                store.add_usage(OWNER, run.pk, {"tokens": 1})
            return index

        outcomes = self.family.run_in_processes(processes, add)
        assert outcomes == list(range(processes)), outcomes
        assert self.stored(run)["usage"] == {"tokens": processes * calls}

    @pytest.mark.django_db(transaction=True)
    def test_usage_added_around_finish_is_kept_exactly_when_accepted(self, store: Any) -> None:
        for _ in range(self.RACE_ROUNDS):
            run = self.start_run(store, self.new_conversation())

            def add_or_finish(index: int) -> str:
                if index == 0:
                    store.finish(OWNER, run.pk, "completed")
                    return "finished"
                try:
                    store.add_usage(OWNER, run.pk, {"tokens": 1})
                    return "added"
                except Conflict as exc:
                    return exc.code

            outcomes = run_in_threads(self.RACE_THREADS, add_or_finish)
            assert set(outcomes) <= {"finished", "added", "run_finished"}, outcomes
            assert self.stored(run)["usage"].get("tokens", 0) == outcomes.count("added")

    # -- status -----------------------------------------------------------------------------

    @pytest.mark.django_db
    def test_finish_ends_an_open_run_once_with_its_error(self, store: Any) -> None:
        conversation = self.new_conversation()
        run = self.start_run(store, conversation)
        error = {"message": "The model timed out.", "code": "timeout"}
        finished = store.finish(OWNER, run.pk, "failed", error=error)
        assert finished.status == "failed" and finished.error == error and finished.finished_at is not None
        for status in ("completed", "failed", "aborted"):
            with pytest.raises(Conflict) as caught:
                store.finish(OWNER, run.pk, status)
            assert caught.value.code == "run_finished"
        row = self.stored(run)
        assert (row["status"], row["error"], row["finished_at"]) == ("failed", error, finished.finished_at)
        parked = self.start_run(store, conversation)
        store.set_status(OWNER, parked.pk, "interrupted")
        done = store.finish(OWNER, parked.pk, "completed")
        assert done.status == "completed" and done.error is None

    @pytest.mark.django_db
    def test_an_error_without_a_code_gets_the_default_code(self, store: Any) -> None:
        """TanStack's ``RunError.code`` is optional: a failRun without one is kept, under ``DEFAULT_ERROR_CODE``."""
        conversation = self.new_conversation()
        for status, error in (("failed", {"message": "boom"}), ("aborted", {"message": "stopped", "code": None})):
            run = self.start_run(store, conversation)
            finished = store.finish(OWNER, run.pk, status, error=error)
            expected = {"message": error["message"], "code": DEFAULT_ERROR_CODE}
            assert (finished.status, finished.error) == (status, expected)
            assert (self.stored(run)["status"], self.stored(run)["error"]) == (status, expected)
        stuck = self.start_run(store, conversation)
        assert store.abort_stuck(stuck.pk, error={"message": "operator"}) is True
        assert self.stored(stuck)["error"] == {"message": "operator", "code": DEFAULT_ERROR_CODE}

    @pytest.mark.django_db
    @pytest.mark.parametrize(
        "status, error",
        [
            ("running", None),
            ("interrupted", None),
            ("done", None),
            ("failed", "boom"),
            ("failed", {"code": "x"}),
            ("failed", {"message": 5}),
            ("failed", {"message": "boom", "code": 5}),
            ("failed", {"message": "boom", "code": ""}),
            ("failed", {"message": "boom", "code": "x", "extra": 1}),
            ("failed", {"message": "nul\x00", "code": "x"}),
        ],
    )
    def test_finish_refuses_a_bad_status_or_error(self, store: Any, status: Any, error: Any) -> None:
        run = self.start_run(store, self.new_conversation())
        with pytest.raises(Validation):
            store.finish(OWNER, run.pk, status, error=error)
        assert self.stored(run)["status"] == "running"

    @pytest.mark.django_db
    def test_an_error_over_the_limit_is_storage_limit(self, store: Any, settings: Any) -> None:
        settings.AGENT_PERSISTENCE = {**settings.AGENT_PERSISTENCE, "MAX_EVENT_BYTES": 100}
        run = self.start_run(store, self.new_conversation())
        with pytest.raises(StorageLimit):
            store.finish(OWNER, run.pk, "failed", error={"message": "m" * 100, "code": "x"})
        assert self.stored(run)["status"] == "running"

    @pytest.mark.django_db
    def test_finish_is_the_owners_and_fenced(self, store: Any) -> None:
        conversation = self.new_conversation(shared=True)
        self.claim_epoch(conversation, 1)
        run = self.start_run(store, conversation, epoch=1)
        with pytest.raises(ConversationNotOwned):
            store.finish(READER, run.pk, "completed")
        self.claim_epoch(conversation, 2)
        with pytest.raises(Fenced):
            store.finish(OWNER, run.pk, "completed", epoch=1)
        assert self.stored(run)["status"] == "running"
        assert store.finish(OWNER, run.pk, "completed", epoch=2).status == "completed"

    @pytest.mark.django_db(transaction=True)
    def test_of_concurrent_finishers_exactly_one_wins(self, store: Any) -> None:
        statuses = ("completed", "failed", "aborted")
        for _ in range(self.RACE_ROUNDS):
            run = self.start_run(store, self.new_conversation())

            def finish(index: int) -> str:
                try:
                    return store.finish(OWNER, run.pk, statuses[index % 3]).status
                except Conflict as exc:
                    return exc.code

            outcomes = run_in_threads(self.RACE_THREADS, finish)
            winners = [o for o in outcomes if o in statuses]
            assert len(winners) == 1 and outcomes.count("run_finished") == self.RACE_THREADS - 1, outcomes
            assert self.stored(run)["status"] == winners[0]

    @pytest.mark.django_db
    def test_set_status_moves_between_running_and_interrupted_only(self, store: Any) -> None:
        conversation = self.new_conversation()
        self.claim_epoch(conversation, 1)
        run = self.start_run(store, conversation)
        assert store.set_status(OWNER, run.pk, "interrupted", epoch=1).status == "interrupted"
        assert store.set_status(OWNER, run.pk, "interrupted").status == "interrupted"
        assert store.set_status(OWNER, run.pk, "running").status == "running"
        for status in ("completed", "aborted", "paused", None):
            with pytest.raises(Validation):
                store.set_status(OWNER, run.pk, status)
        self.claim_epoch(conversation, 2)
        with pytest.raises(Fenced):
            store.set_status(OWNER, run.pk, "interrupted", epoch=1)
        assert self.stored(run)["status"] == "running"
        store.finish(OWNER, run.pk, "aborted")
        with pytest.raises(Conflict) as caught:
            store.set_status(OWNER, run.pk, "running")
        assert caught.value.code == "run_finished" and self.stored(run)["status"] == "aborted"

    # -- detachment, cancellation, operator actions -----------------------------------------

    @pytest.mark.django_db
    def test_mark_detached_keeps_the_first_since_until_cleared(self, store: Any) -> None:
        run = self.start_run(store, self.new_conversation())
        since = timezone.now() - timedelta(minutes=5)
        assert store.mark_detached(OWNER, run.pk, since).detached_since == since
        assert store.mark_detached(OWNER, run.pk).detached_since == since
        assert store.clear_detached(OWNER, run.pk).detached_since is None
        assert store.mark_detached(OWNER, run.pk).detached_since > since
        with pytest.raises(Validation):
            store.mark_detached(OWNER, run.pk, "yesterday")
        store.finish(OWNER, run.pk, "completed")
        for action in (store.mark_detached, store.clear_detached):
            with pytest.raises(Conflict) as caught:
                action(OWNER, run.pk)
            assert caught.value.code == "run_finished"

    @pytest.mark.django_db
    def test_detachment_is_the_owners_and_fenced(self, store: Any) -> None:
        conversation = self.new_conversation(shared=True)
        self.claim_epoch(conversation, 2)
        run = self.start_run(store, conversation)
        with pytest.raises(ConversationNotOwned):
            store.mark_detached(READER, run.pk)
        with pytest.raises(Fenced):
            store.mark_detached(OWNER, run.pk, epoch=1)
        assert self.stored(run)["detached_since"] is None
        store.mark_detached(OWNER, run.pk, epoch=2)
        with pytest.raises(Fenced):
            store.clear_detached(OWNER, run.pk, epoch=1)
        assert self.stored(run)["detached_since"] is not None

    @pytest.mark.django_db
    def test_request_cancel_flags_an_open_run_without_an_epoch(self, store: Any) -> None:
        conversation = self.new_conversation(shared=True)
        self.claim_epoch(conversation, 5)
        run = self.start_run(store, conversation, epoch=5)
        assert store.is_cancel_requested(run.pk) is False
        with pytest.raises(ConversationNotOwned):
            store.request_cancel(READER, run.pk)
        with pytest.raises(NotFound):
            store.request_cancel(STRANGER, run.pk)
        assert store.is_cancel_requested(str(run.pk)) is False
        self.claim_epoch(conversation, 6)  # a stop is not a producer write: a newer epoch does not refuse it
        assert store.request_cancel(OWNER, run.pk).cancel_requested is True
        assert store.is_cancel_requested(run.pk) is True
        assert store.is_cancel_requested(uuid7()) is False

    @pytest.mark.django_db
    def test_request_cancel_leaves_a_finished_run_as_it_is(self, store: Any) -> None:
        run = self.start_run(store, self.new_conversation())
        store.finish(OWNER, run.pk, "completed")
        assert store.request_cancel(OWNER, run.pk).cancel_requested is False
        assert store.is_cancel_requested(run.pk) is False

    @pytest.mark.django_db
    def test_abort_stuck_aborts_an_open_run_once(self, store: Any) -> None:
        conversation = self.new_conversation()
        run, parked, done = (self.start_run(store, conversation) for _ in range(3))
        store.set_status(OWNER, parked.pk, "interrupted")
        store.finish(OWNER, done.pk, "completed")
        assert store.abort_stuck(run.pk) is True
        row = self.stored(run)
        assert row["status"] == "aborted" and row["finished_at"] is not None and row["error"]["code"] == "run_stuck"
        assert store.abort_stuck(run.pk) is False
        reason = {"message": "Operator stopped it.", "code": "operator"}
        assert store.abort_stuck(str(parked.pk), error=reason) is True and self.stored(parked)["error"] == reason
        assert store.abort_stuck(done.pk) is False and self.stored(done)["status"] == "completed"
        assert store.abort_stuck(uuid7()) is False
        with pytest.raises(Validation):
            store.abort_stuck(done.pk, error={"code": "no message"})

    # -- fencing under a concurrent claim ---------------------------------------------------

    @pytest.mark.django_db(transaction=True)
    def test_a_claim_racing_producer_writes_leaves_only_accepted_writes(self, store: Any) -> None:
        for _ in range(self.RACE_ROUNDS):
            conversation = self.new_conversation()
            self.claim_epoch(conversation, 1)
            run = self.start_run(store, conversation, epoch=1)

            def write_or_claim(index: int) -> str:
                if index == 0:
                    self.claim_epoch(conversation, 2)
                    return "claimed"
                accepted = 0
                for _ in range(3):
                    try:
                        store.add_usage(OWNER, run.pk, {"tokens": 1}, epoch=1)
                        accepted += 1
                    except Fenced:
                        return f"fenced after {accepted}"
                return f"all {accepted}"

            outcomes = run_in_threads(self.RACE_THREADS, write_or_claim)
            accepted = sum(int(o.split()[-1]) for o in outcomes[1:])
            assert self.stored(run)["usage"].get("tokens", 0) == accepted, outcomes
            with pytest.raises(Fenced):
                store.add_usage(OWNER, run.pk, {"tokens": 1}, epoch=1)

    @pytest.mark.django_db(transaction=True)
    def test_a_claim_racing_producer_creates_fences_them_without_deadlock(self, store: Any) -> None:
        for _ in range(self.RACE_ROUNDS * 2):
            conversation = self.new_conversation()
            self.claim_epoch(conversation, 1)

            def create_or_claim(index: int) -> int:
                if index == 0:
                    self.claim_epoch(conversation, 2)
                    return 0
                created = 0
                for _ in range(3):
                    try:
                        self.start_run(store, conversation, epoch=1)
                    except Fenced:
                        break
                    created += 1
                return created

            outcomes = run_in_threads(self.RACE_THREADS, create_or_claim)
            assert all(isinstance(o, int) for o in outcomes), outcomes  # no deadlock, no driver error
            assert self.run_count(conversation) == sum(outcomes)

    # -- async twins ------------------------------------------------------------------------

    @pytest.mark.django_db(transaction=True)
    def test_async_twins_do_what_their_sync_methods_do(self, store: Any) -> None:
        conversation = self.new_conversation()
        run_id = uuid7()
        run = async_to_sync(store.acreate_or_resume)(OWNER, conversation.pk, id=run_id, message_id=uuid7())
        assert run.pk == run_id
        assert async_to_sync(store.aget)(OWNER, run_id).pk == run_id
        assert async_to_sync(store.afind_active_run)(OWNER, conversation.pk).pk == run_id
        assert async_to_sync(store.aadd_usage)(OWNER, run_id, {"tokens": 2}).usage == {"tokens": 2}
        assert async_to_sync(store.arequest_cancel)(OWNER, run_id).cancel_requested is True
        assert async_to_sync(store.ais_cancel_requested)(run_id) is True
        assert async_to_sync(store.afinish)(OWNER, run_id, "aborted").status == "aborted"
        assert async_to_sync(store.alist)(OWNER, conversation.pk).total == 1
        assert async_to_sync(store.alist)(OWNER, conversation.pk, before=run_id).items == []
        assert async_to_sync(store.achildren)(OWNER, run_id) == []
        assert async_to_sync(store.aabort_stuck)(run_id) is False

    # -- imports: caller-supplied times -----------------------------------------------------

    @pytest.mark.django_db
    def test_an_import_keeps_its_started_at_and_finished_at(self, store: Any) -> None:
        conversation = self.new_conversation()
        started = timezone.now() - timedelta(days=30)
        run = self.start_run(store, conversation, started_at=started)
        assert run.started_at == started
        finished = store.finish(OWNER, run.pk, "completed", finished_at=(started + timedelta(minutes=2)).isoformat())
        row = self.stored(run)
        assert (row["started_at"], row["finished_at"]) == (started, started + timedelta(minutes=2))
        assert finished.finished_at == row["finished_at"]
        other = self.start_run(store, conversation, started_at=started)  # a finish at the very start is in order
        assert store.finish(OWNER, other.pk, "failed", finished_at=started).finished_at == started

    @pytest.mark.django_db
    def test_runs_imported_out_of_order_list_in_time_order(self, store: Any) -> None:
        conversation = self.new_conversation()
        now = timezone.now()
        parent = self.start_run(store, conversation, started_at=now - timedelta(hours=5))
        imported = [
            self.start_run(store, conversation, started_at=now - timedelta(hours=hours), parent_id=parent.pk)
            for hours in (1, 3, 2)
        ]
        tie = self.start_run(
            store, conversation, id=uuid.UUID(int=imported[1].pk.int + 1), started_at=imported[1].started_at,
            parent_id=parent.pk,
        )
        newest_first = [imported[0].pk, imported[2].pk, tie.pk, imported[1].pk, parent.pk]
        assert [run.pk for run in store.list(OWNER, conversation.pk).items] == newest_first
        assert [run.pk for run in store.children(OWNER, parent.pk)] == [imported[1].pk, tie.pk, imported[2].pk,
                                                                         imported[0].pk]

    @pytest.mark.django_db
    @pytest.mark.parametrize(
        "started_at",
        ["2024-01-01T00:00:00", "yesterday", 1700000000, "future", True],
    )
    def test_a_bad_started_at_is_validation_and_writes_nothing(self, store: Any, started_at: Any) -> None:
        conversation = self.new_conversation()
        if started_at == "future":
            started_at = timezone.now() + timedelta(seconds=app_settings.IMPORT_CLOCK_SKEW + 60)
        with pytest.raises(Validation):
            self.start_run(store, conversation, started_at=started_at)
        assert self.run_count(conversation) == 0

    @pytest.mark.django_db
    def test_a_start_within_the_clock_skew_is_accepted_and_never_finishes_before_it(self, store: Any) -> None:
        conversation = self.new_conversation()
        ahead = timezone.now() + timedelta(seconds=app_settings.IMPORT_CLOCK_SKEW / 2)
        run = self.start_run(store, conversation, started_at=ahead)
        assert store.finish(OWNER, run.pk, "completed").finished_at >= ahead

    @pytest.mark.django_db
    def test_a_finished_at_before_the_start_or_in_the_future_writes_nothing(self, store: Any) -> None:
        conversation = self.new_conversation()
        started = timezone.now() - timedelta(hours=1)
        run = self.start_run(store, conversation, started_at=started)
        too_late = timezone.now() + timedelta(seconds=app_settings.IMPORT_CLOCK_SKEW + 60)
        for finished_at in (started - timedelta(microseconds=1), too_late, "2024-13-01T00:00:00+00:00"):
            with pytest.raises(Validation):
                store.finish(OWNER, run.pk, "completed", finished_at=finished_at)
        row = self.stored(run)
        assert row["status"] == "running" and row["finished_at"] is None

    # -- the lifecycle of seed 003's state diagram -----------------------------------------

    @pytest.mark.django_db
    def test_a_same_id_continuation_moves_an_interrupted_run_on(self, store: Any) -> None:
        conversation = self.new_conversation()
        for ending in ("completed", "failed", "aborted"):
            run = self.start_run(store, conversation)
            store.set_status(OWNER, run.pk, "interrupted")
            again = store.create_or_resume(OWNER, conversation.pk, id=run.pk, message_id=run.message_id)
            assert again.status == "interrupted"  # create-or-resume leaves it parked
            assert store.set_status(OWNER, run.pk, "interrupted").status == "interrupted"  # pauses again
            assert store.find_active_run(OWNER, conversation.pk) is None  # parked is not active
            assert store.finish(OWNER, run.pk, ending).status == ending
            assert self.stored(run)["finished_at"] is not None

    @pytest.mark.django_db
    def test_a_childs_transcript_is_written_with_its_status_and_kept_until_replaced(self, store: Any) -> None:
        conversation = self.new_conversation(shared=True)
        parent = self.start_run(store, conversation)
        child = self.start_run(store, conversation, parent_id=parent.pk, name="researcher")
        assert self.stored(child)["transcript"] == []
        asked = [{"role": "user", "content": "find it"}]
        assert store.set_status(OWNER, child.pk, "interrupted", transcript=asked).transcript == asked
        assert store.set_status(OWNER, child.pk, "running").transcript == asked  # None leaves it as it is
        done = asked + [
            {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "name": "search", "arguments": {"q": "x"}}]},
            {"role": "tool", "content": {"found": 1}, "tool_call_id": "c1", "name": "search"},
            {"role": "assistant", "content": "found one", "name": None, "metadata": {}},
        ]
        finished = store.finish(OWNER, child.pk, "completed", transcript=done)
        # Fields left empty are not stored; what the reader of the shared conversation gets is the same.
        assert finished.transcript == done[:3] + [{"role": "assistant", "content": "found one"}]
        assert store.list_by_parent_run(READER, parent.pk)[0].transcript == finished.transcript
        assert [run.pk for run in store.list_by_parent_run(OWNER, parent.pk)] == [run.pk for run in store.children(OWNER, parent.pk)]

    @pytest.mark.django_db
    def test_a_transcript_over_max_state_bytes_is_storage_limit_and_writes_nothing(self, store: Any, settings: Any) -> None:
        settings.AGENT_PERSISTENCE = {**settings.AGENT_PERSISTENCE, "MAX_STATE_BYTES": 1000}
        conversation = self.new_conversation()
        run = self.start_run(store, conversation)
        before = self.stored(run)
        with pytest.raises(StorageLimit):
            store.finish(OWNER, run.pk, "completed", transcript=[{"role": "assistant", "content": "x" * 600}] * 2)
        assert self.stored(run) == before

    @pytest.mark.django_db
    @pytest.mark.parametrize(
        "transcript",
        [
            "not a list",
            [["role", "user"]],
            [{"content": "no role"}],
            [{"role": "wizard", "content": "x"}],
            [{"role": "user", "content": "x", "id": "mine"}],
            [{"role": "user", "content": "lone \ud800 surrogate"}],
            [{"role": "user", "content": {"nul": "a\x00b"}}],
            [{"role": "user", "content": "x"}] * 1001,
        ],
        ids=["text", "not-objects", "no-role", "bad-role", "unknown-field", "surrogate", "nul", "too-many"],
    )
    def test_a_bad_transcript_is_validation_and_writes_nothing(self, store: Any, transcript: Any) -> None:
        conversation = self.new_conversation()
        run = self.start_run(store, conversation)
        before = self.stored(run)
        with pytest.raises(Validation):
            store.set_status(OWNER, run.pk, "interrupted", transcript=transcript)
        with pytest.raises(Validation):
            store.finish(OWNER, run.pk, "completed", transcript=transcript)
        assert self.stored(run) == before

    @pytest.mark.django_db
    def test_usage_is_kept_when_a_run_fails_or_is_aborted(self, store: Any) -> None:
        conversation = self.new_conversation()
        error = {"message": "The provider failed.", "code": "provider_error"}
        for ending in ("failed", "aborted", "stuck"):
            run = self.start_run(store, conversation)
            store.add_usage(OWNER, run.pk, {"input_tokens": 120, "output_tokens": 7})
            if ending == "stuck":
                assert store.abort_stuck(run.pk) is True
            else:
                store.finish(OWNER, run.pk, ending, error=error)
            assert self.stored(run)["usage"] == {"input_tokens": 120, "output_tokens": 7}

    @pytest.mark.django_db
    def test_a_disconnect_detaches_and_a_cancel_arrives_out_of_band(self, store: Any) -> None:
        conversation = self.new_conversation()
        run = self.start_run(store, conversation)
        since = timezone.now() - timedelta(minutes=1)
        detached = store.mark_detached(OWNER, run.pk, since)
        assert (detached.status, detached.detached_since, detached.cancel_requested) == ("running", since, False)
        assert store.request_cancel(OWNER, run.pk).cancel_requested is True
        row = self.stored(run)
        assert (row["status"], row["detached_since"]) == ("running", since)  # intent recorded, not a status
        assert store.finish(OWNER, run.pk, "aborted").status == "aborted"

    @pytest.mark.django_db
    def test_list_reclaimable_lists_long_detached_running_runs_oldest_first(self, store: Any) -> None:
        mine, theirs = self.new_conversation(), self.new_conversation(STRANGER)
        now = timezone.now()

        def detached(conversation: Conversation, minutes: float, owner: Scope = OWNER, then: str = "") -> Run:
            run = store.create_or_resume(owner, conversation.pk, id=uuid7(), message_id=uuid7())
            store.mark_detached(owner, run.pk, now - timedelta(minutes=minutes))
            if then == "interrupted":
                store.set_status(owner, run.pk, "interrupted")
            elif then:
                store.finish(owner, run.pk, then)
            return run

        old, older, boundary = detached(mine, 10), detached(theirs, 20, STRANGER), detached(mine, 5)
        recent = detached(mine, 1)
        self.start_run(store, mine)  # followed: never detached
        for then in ("interrupted", "completed", "aborted"):
            detached(mine, 60, then=then)
        listed = store.list_reclaimable(timedelta(minutes=5), now=now)
        assert [run.pk for run in listed] == [older.pk, old.pk, boundary.pk]  # detached_since <= now - 5 min
        assert [run.pk for run in store.list_reclaimable(30, now=now)] == [older.pk, old.pk, boundary.pk, recent.pk]
        assert [run.pk for run in store.list_reclaimable(300, now=now, limit=1)] == [older.pk]
        assert store.list_reclaimable(timedelta(hours=2), now=now) == []
        store.clear_detached(OWNER, old.pk)  # taken over
        assert old.pk not in {run.pk for run in store.list_reclaimable(0)}
        for bad in (-1, timedelta(seconds=-1), "5", True, None, float("nan"), 10**30):
            with pytest.raises(Validation):
                store.list_reclaimable(bad)
        for bad_limit in (0, -1, True, "1"):
            with pytest.raises(Validation):
                store.list_reclaimable(0, limit=bad_limit)
        with pytest.raises(Validation):
            store.list_reclaimable(0, now="now")

    @pytest.mark.django_db(transaction=True)
    def test_async_list_reclaimable_does_what_its_sync_method_does(self, store: Any) -> None:
        run = self.start_run(store, self.new_conversation())
        store.mark_detached(OWNER, run.pk, timezone.now() - timedelta(minutes=1))
        assert [r.pk for r in async_to_sync(store.alist_reclaimable)(30)] == [run.pk]
