"""The contract of an interrupt store: every rule of :class:`~agent_persistence.stores.interrupts.InterruptStore`.

Subclass :class:`InterruptStoreContract` and override ``make_stores()`` (the
family) or ``make_store()`` to run it against another backend. Conversations,
runs and supervision claims are set up through the family's other stores, and
the suite asserts through the store API only; races run in real threads on
committed data.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.utils import timezone

from ..conf import app_settings
from ..exceptions import Conflict, ConversationNotOwned, Fenced, Gone, NotFound, StorageLimit, Validation
from ..ids import uuid7
from ..models import Conversation, Interrupt, Run, RunStatus
from .concurrency import run_in_threads
from .family import FamilyContract, frozen_clock, new_run, record_of
from .runs import OWNER, READER, STRANGER


#: A payload of the tool kinds (``tool_approval``, ``client_tool``): the tool call asked about.
TOOL_CALL = {"tool_call_id": "call_1", "name": "delete_file", "arguments": {"path": "/tmp/x"}}


class InterruptStoreContract(FamilyContract):
    """The behaviour every interrupt store must have, on every database it supports."""

    RACE_ROUNDS = 6
    RACE_THREADS = 8

    def make_store(self) -> Any:
        return self.family.interrupts

    @pytest.fixture
    def store(self, stores: Any) -> Any:
        return self.make_store()

    def make_run(self, conversation: Conversation, *, status: str = RunStatus.RUNNING) -> Run:
        """A run of the conversation in ``status``, through the family's run store."""
        runs = self.family.runs
        run = new_run(self.family, conversation)
        if status == RunStatus.INTERRUPTED:
            run = runs.set_status(OWNER, run.pk, status)
        elif status != RunStatus.RUNNING:
            run = runs.finish(OWNER, run.pk, status)
        return run

    def stored(self, interrupt_id: uuid.UUID, scope: Any = OWNER) -> dict[str, Any]:
        """Every field of the interrupt as the store holds it now."""
        return record_of(self.family.interrupts.get(scope, interrupt_id))

    def statuses(self, conversation: Conversation) -> dict[uuid.UUID, str]:
        return {interrupt.pk: interrupt.status for interrupt in self.family.interrupts.list(OWNER, conversation.pk)}

    def interrupt_count(self, *conversations: Conversation) -> int:
        return sum(len(self.family.interrupts.list(OWNER, conversation.pk)) for conversation in conversations)

    def ask(self, store: Any, conversation: Conversation, run: Run | None = None, **options: Any) -> Interrupt:
        """A new pending interrupt of ``run`` (a fresh run of the conversation when None).

        A tool approval by default, about a tool call unless ``payload`` says otherwise.
        """
        run = run or self.make_run(conversation)
        options.setdefault("kind", "tool_approval")
        if options["kind"] != "generic":
            options["payload"] = {**TOOL_CALL, **options.get("payload", {})}
        return store.create(OWNER, conversation.pk, id=options.pop("id", uuid7()), run_id=run.pk, **options)

    # -- create -----------------------------------------------------------------------------

    @pytest.mark.django_db
    def test_create_inserts_a_pending_interrupt(self, store: Any) -> None:
        conversation = self.new_conversation()
        self.claim_epoch(conversation, 4)
        run = self.make_run(conversation)
        interrupt_id = uuid7()
        expires_at = timezone.now() + timedelta(hours=1)
        payload = {**TOOL_CALL, "when": "2024-01-01"}
        interrupt = store.create(
            OWNER, conversation.pk, id=interrupt_id, run_id=run.pk, kind="tool_approval",
            payload=payload, expires_at=expires_at, epoch=4,
        )
        assert interrupt.pk == interrupt_id
        row = self.stored(interrupt_id)
        assert (row["run_id"], row["conversation_id"], row["kind"], row["status"]) == (
            run.pk, conversation.pk, "tool_approval", "pending"
        )
        assert row["payload"] == payload and row["expires_at"] == expires_at and row["epoch"] == 4
        assert row["response"] is None and row["resolved_at"] is None and row["resolved_by"] is None
        plain = store.create(OWNER, str(conversation.pk), id=str(uuid7()), run_id=str(run.pk), kind="generic")
        assert plain.payload == {} and plain.expires_at is None and plain.epoch == 0

    @pytest.mark.django_db
    def test_a_second_create_returns_the_original(self, store: Any) -> None:
        conversation = self.new_conversation()
        first = self.ask(store, conversation, payload={"n": 1})
        again = store.create(
            OWNER, conversation.pk, id=first.pk, run_id=self.make_run(conversation).pk, kind="generic", payload={"n": 2}
        )
        assert (again.run_id, again.kind, again.payload) == (first.run_id, "tool_approval", {**TOOL_CALL, "n": 1})
        store.commit_batch(OWNER, conversation.pk, [{"id": first.pk, "response": True}])
        resolved = store.create(OWNER, conversation.pk, id=first.pk, run_id=first.run_id, kind="generic")
        assert resolved.status == "resolved"
        assert self.interrupt_count(conversation) == 1

    @pytest.mark.django_db
    def test_create_checks_the_run_and_the_id(self, store: Any) -> None:
        conversation, other = self.new_conversation(), self.new_conversation()
        with pytest.raises(NotFound) as caught:
            self.ask(store, conversation, self.make_run(other))
        assert caught.value.code == "run_not_found"
        for unknown in (uuid7(), "not-a-run", 7):
            with pytest.raises(NotFound) as caught:
                store.create(OWNER, conversation.pk, id=uuid7(), run_id=unknown, kind="generic")
            assert caught.value.code == "run_not_found"
        for status in (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.ABORTED):
            with pytest.raises(Conflict) as caught:
                self.ask(store, conversation, self.make_run(conversation, status=status))
            assert caught.value.code == "run_finished"
        assert self.ask(store, conversation, self.make_run(conversation, status=RunStatus.INTERRUPTED)).status == "pending"
        theirs = self.ask(store, other)
        with pytest.raises(Conflict) as caught:
            self.ask(store, conversation, id=theirs.pk)
        assert caught.value.code == "interrupt_id_taken"
        assert self.interrupt_count(conversation, other) == 2

    @pytest.mark.django_db
    @pytest.mark.parametrize(
        "bad",
        [
            {"kind": "approval"},
            {"kind": None},
            {"id": "nope"},
            {"payload": [1, 2]},
            {"payload": "text"},
            {"payload": {"x": "nul\x00"}},
            {"payload": {"x": float("nan")}},
            {"expires_at": "tomorrow"},
            {"expires_at": "2030-01-01T00:00:00"},
            {"epoch": -2},
        ],
    )
    def test_bad_input_is_validation_and_writes_nothing(self, store: Any, bad: dict[str, Any]) -> None:
        conversation = self.new_conversation()
        arguments = {"id": uuid7(), "run_id": self.make_run(conversation).pk, "kind": "generic", **bad}
        with pytest.raises(Validation):
            store.create(OWNER, conversation.pk, **arguments)
        assert self.interrupt_count(conversation) == 0

    @pytest.mark.django_db
    def test_payloads_and_responses_over_the_limit_are_storage_limit(self, store: Any, settings: Any) -> None:
        settings.AGENT_PERSISTENCE = {**settings.AGENT_PERSISTENCE, "MAX_MESSAGE_BYTES": 100}
        conversation = self.new_conversation()
        with pytest.raises(StorageLimit):
            self.ask(store, conversation, payload={"text": "x" * 100})
        assert self.interrupt_count(conversation) == 0
        interrupt = self.ask(store, conversation, kind="generic", payload={"text": "x" * 50})
        with pytest.raises(StorageLimit):
            store.commit_batch(OWNER, conversation.pk, [{"id": interrupt.pk, "response": "y" * 100}])
        assert self.stored(interrupt.pk)["status"] == "pending"

    @pytest.mark.django_db
    def test_only_the_owner_creates_interrupts(self, store: Any) -> None:
        shared = self.new_conversation(shared=True)
        run = self.make_run(shared)
        with pytest.raises(ConversationNotOwned):
            store.create(READER, shared.pk, id=uuid7(), run_id=run.pk, kind="generic")
        with pytest.raises(NotFound):
            store.create(STRANGER, shared.pk, id=uuid7(), run_id=run.pk, kind="generic")
        assert self.interrupt_count(shared) == 0

    @pytest.mark.django_db
    def test_create_with_a_stale_epoch_is_fenced_and_writes_nothing(self, store: Any) -> None:
        conversation = self.new_conversation()
        run = self.make_run(conversation)
        self.claim_epoch(conversation, 2)
        with pytest.raises(Fenced):
            self.ask(store, conversation, run, epoch=1)
        assert self.interrupt_count(conversation) == 0
        assert self.ask(store, conversation, run, epoch=2).epoch == 2

    @pytest.mark.django_db(transaction=True)
    def test_concurrent_creates_of_one_id_insert_one_row_and_agree(self, store: Any) -> None:
        conversation = self.new_conversation()
        runs = [self.make_run(conversation) for _ in range(self.RACE_THREADS)]
        for _ in range(self.RACE_ROUNDS):
            interrupt_id = uuid7()

            def create(index: int) -> tuple[uuid.UUID, uuid.UUID]:
                interrupt = store.create(
                    OWNER, conversation.pk, id=interrupt_id, run_id=runs[index].pk, kind="generic", payload={"i": index}
                )
                return interrupt.pk, interrupt.run_id

            outcomes = run_in_threads(self.RACE_THREADS, create)
            assert len(set(outcomes)) == 1, outcomes
            assert self.stored(interrupt_id)["run_id"] == outcomes[0][1]

    @pytest.mark.django_db(transaction=True)
    def test_a_claim_racing_producer_creates_fences_them_without_deadlock(self, store: Any) -> None:
        for _ in range(self.RACE_ROUNDS):
            conversation = self.new_conversation()
            run = self.make_run(conversation)
            self.claim_epoch(conversation, 1)

            def create_or_claim(index: int) -> int:
                if index == 0:
                    self.claim_epoch(conversation, 2)
                    return 0
                created = 0
                for _ in range(3):
                    try:
                        self.ask(store, conversation, run, epoch=1)
                    except Fenced:
                        break
                    created += 1
                return created

            outcomes = run_in_threads(self.RACE_THREADS, create_or_claim)
            assert all(isinstance(o, int) for o in outcomes), outcomes  # no deadlock, no driver error
            assert self.interrupt_count(conversation) == sum(outcomes)

    # -- reading ----------------------------------------------------------------------------

    @pytest.mark.django_db
    def test_reads_follow_the_conversation_read_rule_and_order(self, store: Any) -> None:
        conversation, private = self.new_conversation(shared=True), self.new_conversation()
        first_run, second_run = self.make_run(conversation), self.make_run(conversation)
        now = timezone.now()
        asked = []
        for offset, run in zip((2, 0, 1), (first_run, second_run, first_run)):
            with frozen_clock(now + timedelta(seconds=offset)):
                asked.append(self.ask(store, conversation, run))
        hidden = self.ask(store, private)
        assert [i.pk for i in store.list(READER, conversation.pk)] == [asked[1].pk, asked[2].pk, asked[0].pk]
        assert [i.pk for i in store.list(OWNER, conversation.pk, run_id=first_run.pk)] == [asked[2].pk, asked[0].pk]
        assert [i.pk for i in store.pending(READER, conversation.pk)] == [asked[1].pk, asked[2].pk, asked[0].pk]
        assert store.get(READER, asked[0].pk).pk == asked[0].pk
        for scope, interrupt_id in ((READER, hidden.pk), (STRANGER, asked[0].pk), (OWNER, uuid7()), (OWNER, "x")):
            with pytest.raises(NotFound) as caught:
                store.get(scope, interrupt_id)
            assert caught.value.code == "interrupt_not_found"
        with pytest.raises(NotFound):
            store.list(READER, private.pk)
        with pytest.raises(NotFound):
            store.pending(STRANGER, conversation.pk)
        with pytest.raises(Validation):
            store.list(OWNER, conversation.pk, status="open")
        with pytest.raises(Validation):
            store.list(OWNER, conversation.pk, run_id="x")

    @pytest.mark.django_db
    def test_pending_and_has_pending_follow_the_commits(self, store: Any) -> None:
        conversation = self.new_conversation()
        assert store.has_pending(conversation.pk) is False and store.pending(OWNER, conversation.pk) == []
        first, second = self.ask(store, conversation), self.ask(store, conversation)
        assert store.has_pending(str(conversation.pk)) is True
        store.commit_batch(OWNER, conversation.pk, [{"id": first.pk, "response": 1}, {"id": second.pk, "response": 2}])
        assert store.has_pending(conversation.pk) is False and store.pending(OWNER, conversation.pk) == []
        assert [i.status for i in store.list(OWNER, conversation.pk, status="resolved")] == ["resolved", "resolved"]
        assert store.has_pending(uuid7()) is False

    # -- commit_batch -----------------------------------------------------------------------

    @pytest.mark.django_db
    def test_commit_batch_resolves_every_pending_interrupt_at_once(self, store: Any) -> None:
        conversation = self.new_conversation()
        first, second = self.ask(store, conversation), self.ask(store, conversation, kind="client_tool")
        now = timezone.now()
        answers = [{"id": str(second.pk), "response": {"result": [1, "two"]}}, {"id": first.pk, "response": False}]
        outcome = store.commit_batch(OWNER, conversation.pk, answers, now=now)
        assert [i.pk for i in outcome] == [second.pk, first.pk]
        assert [i.response for i in outcome] == [{"result": [1, "two"]}, False]
        for interrupt in outcome:
            row = self.stored(interrupt.pk)
            assert row["status"] == "resolved" and row["resolved_at"] == now and row["resolved_by"] == OWNER.user
        third = self.ask(store, conversation)
        assert store.commit_batch(OWNER, conversation.pk, [{"id": third.pk, "response": None}], resolved_by="ops")[
            0
        ].resolved_by == "ops"
        assert self.stored(third.pk)["status"] == "resolved" and self.stored(third.pk)["response"] is None
        assert store.commit_batch(OWNER, self.new_conversation().pk, []) == []

    @pytest.mark.django_db
    def test_a_partial_batch_settles_its_entries_and_leaves_the_rest_pending(self, store: Any) -> None:
        """TanStack's ``resolve(interruptId)`` of one of several: that answer is kept, the others still wait."""
        conversation = self.new_conversation()
        first, second, third = (self.ask(store, conversation) for _ in range(3))
        now = timezone.now()
        outcome = store.commit_batch(OWNER, conversation.pk, [{"id": second.pk, "response": "yes"}], now=now)
        assert [(i.pk, i.status, i.response) for i in outcome] == [(second.pk, "resolved", "yes")]
        assert self.statuses(conversation) == {first.pk: "pending", second.pk: "resolved", third.pk: "pending"}
        assert self.stored(second.pk)["resolved_at"] == now
        assert [i.pk for i in store.pending(OWNER, conversation.pk)] == [first.pk, third.pk]
        assert store.has_pending(conversation.pk) is True
        # A repeat of the settled answer alone is its first outcome; a different one is a conflict.
        again = store.commit_batch(OWNER, conversation.pk, [{"id": second.pk, "response": "yes"}])
        assert [(i.status, i.resolved_at) for i in again] == [("resolved", now)]
        with pytest.raises(Conflict) as caught:
            store.commit_batch(OWNER, conversation.pk, [{"id": second.pk, "response": "no"}])
        assert caught.value.code == "already_answered"
        # An empty batch settles nothing while questions wait: it names them.
        with pytest.raises(Validation) as caught:
            store.commit_batch(OWNER, conversation.pk, [])
        assert caught.value.code == "unanswered_interrupts"
        assert caught.value.details["ids"] == [str(first.pk), str(third.pk)]
        # The rest, with the settled one repeated, settles the batch.
        rest = [{"id": first.pk, "status": "cancelled"}, {"id": second.pk, "response": "yes"}, {"id": third.pk, "response": 3}]
        assert [i.status for i in store.commit_batch(OWNER, conversation.pk, rest)] == ["cancelled", "resolved", "resolved"]
        assert store.has_pending(conversation.pk) is False

    @pytest.mark.django_db
    def test_a_batch_naming_an_unknown_interrupt_writes_nothing(self, store: Any) -> None:
        conversation, other = self.new_conversation(), self.new_conversation()
        mine, theirs = self.ask(store, conversation), self.ask(store, other)
        for unknown in (uuid7(), theirs.pk, "not-an-id", None):
            with pytest.raises(NotFound) as caught:
                store.commit_batch(
                    OWNER, conversation.pk, [{"id": mine.pk, "response": 1}, {"id": unknown, "response": 2}]
                )
            assert caught.value.code == "interrupt_not_found"
        assert self.stored(mine.pk)["status"] == "pending" and self.stored(theirs.pk)["status"] == "pending"

    @pytest.mark.django_db
    def test_a_batch_answering_one_interrupt_twice_writes_nothing(self, store: Any) -> None:
        conversation = self.new_conversation()
        first, second = self.ask(store, conversation), self.ask(store, conversation)
        answers = [
            {"id": first.pk, "response": 1},
            {"id": second.pk, "response": 2},
            {"id": str(first.pk), "response": 1},
        ]
        with pytest.raises(Validation) as caught:
            store.commit_batch(OWNER, conversation.pk, answers)
        assert caught.value.code == "duplicate_answer"
        assert set(self.statuses(conversation).values()) == {"pending"}

    @pytest.mark.django_db
    @pytest.mark.parametrize(
        "answers",
        [
            "yes",
            None,
            [None],
            [{"id": "ID"}],
            [{"id": "ID", "response": 1, "approved": True}],
            [{"id": "ID", "response": float("nan")}],
            [{"id": "ID", "response": "nul\x00"}],
        ],
    )
    def test_a_malformed_batch_is_validation(self, store: Any, answers: Any) -> None:
        conversation = self.new_conversation()
        interrupt = self.ask(store, conversation)
        if isinstance(answers, list):
            answers = [
                {k: (str(interrupt.pk) if v == "ID" else v) for k, v in a.items()} if isinstance(a, dict) else a
                for a in answers
            ]
        with pytest.raises(Validation):
            store.commit_batch(OWNER, conversation.pk, answers)
        assert self.stored(interrupt.pk)["status"] == "pending"

    @pytest.mark.django_db
    def test_a_repeated_identical_answer_returns_the_first_outcome(self, store: Any) -> None:
        conversation = self.new_conversation()
        interrupt = self.ask(store, conversation)
        response = {"approved": True, "note": "go", "scores": [1, 2.5]}
        first = store.commit_batch(OWNER, conversation.pk, [{"id": interrupt.pk, "response": response}])[0]
        later = timezone.now() + timedelta(minutes=1)
        same = {"scores": [1.0, 2.5], "note": "go", "approved": True}  # the same JSON value, keys reordered
        again = store.commit_batch(
            OWNER, conversation.pk, [{"id": interrupt.pk, "response": same}], resolved_by="someone", now=later
        )[0]
        assert (again.response, again.resolved_at, again.resolved_by) == (response, first.resolved_at, OWNER.user)
        assert self.stored(interrupt.pk)["resolved_at"] == first.resolved_at

    @pytest.mark.django_db
    def test_a_different_answer_to_an_answered_interrupt_is_a_conflict(self, store: Any) -> None:
        conversation = self.new_conversation()
        interrupt = self.ask(store, conversation)
        store.commit_batch(OWNER, conversation.pk, [{"id": interrupt.pk, "response": {"approved": True}}])
        for different in ({"approved": False}, {"approved": 1}, {"approved": True, "x": None}, [True], None):
            with pytest.raises(Conflict) as caught:
                store.commit_batch(OWNER, conversation.pk, [{"id": interrupt.pk, "response": different}])
            assert caught.value.code == "already_answered"
        assert self.stored(interrupt.pk)["response"] == {"approved": True}

    @pytest.mark.django_db
    def test_a_batch_may_repeat_old_answers_beside_new_ones(self, store: Any) -> None:
        conversation = self.new_conversation()
        old = self.ask(store, conversation)
        store.commit_batch(OWNER, conversation.pk, [{"id": old.pk, "response": "yes"}])
        new = self.ask(store, conversation)
        outcome = store.commit_batch(
            OWNER, conversation.pk, [{"id": old.pk, "response": "yes"}, {"id": new.pk, "response": "no"}]
        )
        assert [(i.status, i.response) for i in outcome] == [("resolved", "yes"), ("resolved", "no")]
        with pytest.raises(Conflict):  # one changed answer refuses the whole batch
            store.commit_batch(
                OWNER, conversation.pk, [{"id": old.pk, "response": "no"}, {"id": new.pk, "response": "no"}]
            )

    @pytest.mark.django_db
    def test_a_lapsed_interrupt_is_gone_and_the_batch_writes_nothing(self, store: Any) -> None:
        conversation = self.new_conversation()
        now = timezone.now()
        live = self.ask(store, conversation, expires_at=now + timedelta(minutes=5))
        lapsed = self.ask(store, conversation, expires_at=now - timedelta(seconds=1))
        answers = [{"id": live.pk, "response": 1}, {"id": lapsed.pk, "response": 2}]
        with pytest.raises(Gone) as caught:
            store.commit_batch(OWNER, conversation.pk, answers, now=now)
        assert caught.value.code == "interrupt_expired"
        with pytest.raises(Gone):  # expires_at == now has lapsed too
            store.commit_batch(OWNER, conversation.pk, answers, now=live.expires_at)
        assert set(self.statuses(conversation).values()) == {"pending"}
        store.expire_lapsed(now=now)
        with pytest.raises(Gone):  # and stays gone once the sweep cancelled it
            store.commit_batch(OWNER, conversation.pk, answers, now=now)
        assert store.commit_batch(OWNER, conversation.pk, answers[:1], now=now)[0].status == "resolved"

    @pytest.mark.django_db
    def test_answering_a_cancelled_interrupt_is_a_conflict(self, store: Any) -> None:
        conversation = self.new_conversation()
        interrupt = self.ask(store, conversation)
        store.cancel_pending(OWNER, conversation.pk)
        with pytest.raises(Conflict) as caught:
            store.commit_batch(OWNER, conversation.pk, [{"id": interrupt.pk, "response": 1}])
        assert caught.value.code == "interrupt_cancelled"
        assert self.stored(interrupt.pk)["status"] == "cancelled"

    @pytest.mark.django_db
    def test_only_the_owner_answers(self, store: Any) -> None:
        shared = self.new_conversation(shared=True)
        interrupt = self.ask(store, shared)
        answers = [{"id": interrupt.pk, "response": 1}]
        with pytest.raises(ConversationNotOwned):
            store.commit_batch(READER, shared.pk, answers)
        with pytest.raises(NotFound):
            store.commit_batch(STRANGER, shared.pk, answers)
        with pytest.raises(Validation):
            store.commit_batch(OWNER, shared.pk, answers, now="later")
        assert self.stored(interrupt.pk)["status"] == "pending"

    @pytest.mark.django_db(transaction=True)
    def test_concurrent_identical_batches_write_once_and_agree(self, store: Any) -> None:
        for _ in range(self.RACE_ROUNDS):
            conversation = self.new_conversation()
            asked = [self.ask(store, conversation) for _ in range(3)]
            answers = [{"id": i.pk, "response": {"approved": n % 2 == 0}} for n, i in enumerate(asked)]

            def answer(index: int) -> list[tuple[str, Any]]:
                outcome = store.commit_batch(OWNER, conversation.pk, answers, resolved_by=f"tab{index}")
                return [(i.resolved_by, i.resolved_at) for i in outcome]

            outcomes = run_in_threads(self.RACE_THREADS, answer)
            assert not [o for o in outcomes if isinstance(o, BaseException)], outcomes
            # One writer: every caller sees the same first outcome, the one stored.
            assert len({tuple(o) for o in outcomes}) == 1
            rows = [self.stored(i.pk) for i in asked]
            assert [(r["resolved_by"], r["resolved_at"]) for r in rows] == outcomes[0]
            assert len({r["resolved_by"] for r in rows}) == 1

    @pytest.mark.django_db(transaction=True)
    def test_of_concurrent_different_batches_exactly_one_wins(self, store: Any) -> None:
        for _ in range(self.RACE_ROUNDS):
            conversation = self.new_conversation()
            first, second = self.ask(store, conversation), self.ask(store, conversation)

            def answer(index: int) -> Any:
                try:
                    store.commit_batch(
                        OWNER, conversation.pk,
                        [{"id": first.pk, "response": {"choice": index}}, {"id": second.pk, "response": index}],
                    )
                    return index
                except Conflict as exc:
                    return exc.code

            outcomes = run_in_threads(self.RACE_THREADS, answer)
            winners = [o for o in outcomes if isinstance(o, int)]
            assert len(winners) == 1 and outcomes.count("already_answered") == self.RACE_THREADS - 1, outcomes
            assert self.stored(first.pk)["response"] == {"choice": winners[0]}
            assert self.stored(second.pk)["response"] == winners[0]

    # -- cancelling and the lapse sweep -----------------------------------------------------

    @pytest.mark.django_db
    def test_cancel_pending_cancels_the_pending_ones_only(self, store: Any) -> None:
        conversation = self.new_conversation()
        run, other_run = self.make_run(conversation), self.make_run(conversation)
        answered = self.ask(store, conversation, run)
        store.commit_batch(OWNER, conversation.pk, [{"id": answered.pk, "response": "ok"}])
        of_run = [self.ask(store, conversation, run) for _ in range(2)]
        of_other = self.ask(store, conversation, other_run)
        assert store.cancel_pending(OWNER, conversation.pk, run_id=run.pk) == 2
        for interrupt in of_run:
            row = self.stored(interrupt.pk)
            assert row["status"] == "cancelled" and row["resolved_at"] is not None and row["response"] is None
        assert self.stored(of_other.pk)["status"] == "pending" and self.stored(answered.pk)["status"] == "resolved"
        assert store.cancel_pending(OWNER, conversation.pk) == 1
        assert store.cancel_pending(OWNER, conversation.pk) == 0
        assert store.has_pending(conversation.pk) is False

    @pytest.mark.django_db
    def test_cancel_pending_is_the_owners_and_fenced(self, store: Any) -> None:
        conversation = self.new_conversation(shared=True)
        interrupt = self.ask(store, conversation)
        with pytest.raises(ConversationNotOwned):
            store.cancel_pending(READER, conversation.pk)
        with pytest.raises(NotFound):
            store.cancel_pending(STRANGER, conversation.pk)
        self.claim_epoch(conversation, 3)
        with pytest.raises(Fenced):
            store.cancel_pending(OWNER, conversation.pk, epoch=2)
        with pytest.raises(Validation):
            store.cancel_pending(OWNER, conversation.pk, run_id="x")
        assert self.stored(interrupt.pk)["status"] == "pending"
        assert store.cancel_pending(OWNER, conversation.pk, epoch=3) == 1

    @pytest.mark.django_db
    def test_expire_lapsed_cancels_lapsed_pending_interrupts_in_batches(self, store: Any, settings: Any) -> None:
        settings.AGENT_PERSISTENCE = {**settings.AGENT_PERSISTENCE, "SWEEP_BATCH_SIZE": 2}
        conversation = self.new_conversation()
        now = timezone.now()
        lapsed = [self.ask(store, conversation, expires_at=now - timedelta(minutes=m)) for m in (1, 5, 3, 4, 2)]
        due_now = self.ask(store, conversation, expires_at=now)
        live = self.ask(store, conversation, expires_at=now + timedelta(seconds=1))
        forever = self.ask(store, conversation)
        answered = self.ask(store, self.new_conversation(), expires_at=now - timedelta(hours=1))
        store.commit_batch(
            OWNER, answered.conversation_id, [{"id": answered.pk, "response": 1}], now=now - timedelta(days=1)
        )
        assert store.expire_lapsed(now=now, limit=3) == 3
        # Earliest deadline first: -5, -4, -3 minutes.
        assert {pk for pk, s in self.statuses(conversation).items() if s == "cancelled"} == {
            lapsed[1].pk, lapsed[3].pk, lapsed[2].pk
        }
        assert store.expire_lapsed(now=now) == 3
        for interrupt in (*lapsed, due_now):
            row = self.stored(interrupt.pk)
            assert row["status"] == "cancelled" and row["response"] == {"expired": True} and row["resolved_at"] == now
        assert self.stored(live.pk)["status"] == "pending" and self.stored(forever.pk)["status"] == "pending"
        assert self.stored(answered.pk)["status"] == "resolved"
        assert store.expire_lapsed(now=now) == 0
        with pytest.raises(Validation):
            store.expire_lapsed(limit=0)

    # -- async twins ------------------------------------------------------------------------

    @pytest.mark.django_db(transaction=True)
    def test_async_twins_do_what_their_sync_methods_do(self, store: Any) -> None:
        conversation = self.new_conversation()
        run = self.make_run(conversation)
        interrupt_id = uuid7()
        created = async_to_sync(store.acreate)(OWNER, conversation.pk, id=interrupt_id, run_id=run.pk, kind="generic")
        assert created.pk == interrupt_id
        assert async_to_sync(store.aget)(OWNER, interrupt_id).pk == interrupt_id
        assert [i.pk for i in async_to_sync(store.alist)(OWNER, conversation.pk)] == [interrupt_id]
        assert [i.pk for i in async_to_sync(store.apending)(OWNER, conversation.pk)] == [interrupt_id]
        assert async_to_sync(store.ahas_pending)(conversation.pk) is True
        outcome = async_to_sync(store.acommit_batch)(OWNER, conversation.pk, [{"id": interrupt_id, "response": 1}])
        assert outcome[0].status == "resolved"
        assert async_to_sync(store.acancel_pending)(OWNER, conversation.pk) == 0
        assert async_to_sync(store.aexpire_lapsed)() == 0

    # -- mixed batches: resolved and cancelled entries --------------------------------------

    @pytest.mark.django_db
    def test_a_mixed_batch_resolves_and_cancels_in_one_commit(self, store: Any) -> None:
        conversation = self.new_conversation()
        approve, dismiss, skip = (self.ask(store, conversation) for _ in range(3))
        now = timezone.now()
        batch = [
            {"id": approve.pk, "status": "resolved", "response": {"approved": True}},
            {"id": str(dismiss.pk), "status": "cancelled"},
            {"id": skip.pk, "status": "cancelled"},
        ]
        outcome = store.commit_batch(OWNER, conversation.pk, batch, now=now)
        assert [(i.pk, i.status, i.response) for i in outcome] == [
            (approve.pk, "resolved", {"approved": True}), (dismiss.pk, "cancelled", None), (skip.pk, "cancelled", None)
        ]
        for interrupt in (approve, dismiss, skip):
            row = self.stored(interrupt.pk)
            assert row["resolved_at"] == now and row["resolved_by"] == OWNER.user
        assert store.has_pending(conversation.pk) is False
        # The same batch again is a repeat: the first outcome, unchanged.
        again = store.commit_batch(OWNER, conversation.pk, batch, now=now + timedelta(minutes=1))
        assert [(i.status, i.resolved_at) for i in again] == [(i.status, now) for i in outcome]

    @pytest.mark.django_db
    def test_a_mixed_batch_that_is_refused_writes_nothing(self, store: Any) -> None:
        conversation = self.new_conversation()
        now = timezone.now()
        first, second = self.ask(store, conversation), self.ask(store, conversation)
        lapsed = self.ask(store, conversation, expires_at=now - timedelta(seconds=1))
        cancel_all = [{"id": i.pk, "status": "cancelled"} for i in (first, second)]
        with pytest.raises(Gone):  # cancelling a lapsed one is refused like answering it
            store.commit_batch(OWNER, conversation.pk, [*cancel_all, {"id": lapsed.pk, "response": 1}], now=now)
        assert set(self.statuses(conversation).values()) == {"pending"}
        # Without the lapsed entry the batch is a partial one: it lands, the lapsed question stays pending.
        assert [i.status for i in store.commit_batch(OWNER, conversation.pk, cancel_all, now=now)] == ["cancelled"] * 2
        assert self.statuses(conversation)[lapsed.pk] == "pending"

    @pytest.mark.django_db
    def test_an_entry_that_contradicts_the_stored_outcome_is_a_conflict(self, store: Any) -> None:
        conversation = self.new_conversation()
        resolved, cancelled = self.ask(store, conversation), self.ask(store, conversation)
        store.commit_batch(
            OWNER, conversation.pk, [{"id": resolved.pk, "response": "yes"}, {"id": cancelled.pk, "status": "cancelled"}]
        )
        with pytest.raises(Conflict) as caught:
            store.commit_batch(OWNER, conversation.pk, [{"id": resolved.pk, "status": "cancelled"}])
        assert caught.value.code == "already_answered"
        with pytest.raises(Conflict) as caught:
            store.commit_batch(OWNER, conversation.pk, [{"id": cancelled.pk, "response": "yes"}])
        assert caught.value.code == "interrupt_cancelled"
        assert (self.stored(resolved.pk)["status"], self.stored(cancelled.pk)["status"]) == ("resolved", "cancelled")

    @pytest.mark.django_db
    @pytest.mark.parametrize(
        "entry",
        [
            {"status": "cancelled", "response": None},
            {"status": "resolved"},
            {"status": "done", "response": 1},
            {"status": None, "response": 1},
            {"status": ["cancelled"]},
            {"status": "cancelled", "reason": "no"},
        ],
    )
    def test_a_malformed_entry_is_validation_and_writes_nothing(self, store: Any, entry: dict[str, Any]) -> None:
        conversation = self.new_conversation()
        interrupt = self.ask(store, conversation)
        with pytest.raises(Validation):
            store.commit_batch(OWNER, conversation.pk, [{"id": interrupt.pk, **entry}])
        assert self.stored(interrupt.pk)["status"] == "pending"

    @pytest.mark.django_db(transaction=True)
    def test_of_a_resolving_and_a_cancelling_batch_racing_exactly_one_wins(self, store: Any) -> None:
        for _ in range(self.RACE_ROUNDS):
            conversation = self.new_conversation()
            interrupt = self.ask(store, conversation)

            def settle(index: int) -> str:
                entry = {"id": interrupt.pk, "response": index} if index % 2 else {"id": interrupt.pk, "status": "cancelled"}
                try:
                    return store.commit_batch(OWNER, conversation.pk, [entry])[0].status
                except Conflict as exc:
                    return exc.code

            outcomes = run_in_threads(self.RACE_THREADS, settle)
            row = self.stored(interrupt.pk)
            winners = [o for o in outcomes if o in ("resolved", "cancelled")]
            # Every other batch either repeats the winner's outcome or is refused: nothing is written twice.
            assert set(winners) == {row["status"]}, outcomes
            if row["status"] == "cancelled":
                assert outcomes.count("cancelled") == self.RACE_THREADS // 2, outcomes
                assert outcomes.count("interrupt_cancelled") == self.RACE_THREADS // 2, outcomes
            else:
                assert winners == ["resolved"], outcomes
                assert outcomes.count("already_answered") == self.RACE_THREADS - 1, outcomes

    # -- cancelling one interrupt -----------------------------------------------------------

    @pytest.mark.django_db
    def test_cancel_cancels_one_pending_interrupt(self, store: Any) -> None:
        conversation = self.new_conversation()
        dismissed, kept = self.ask(store, conversation), self.ask(store, conversation)
        cancelled = store.cancel(OWNER, str(dismissed.pk))
        assert (cancelled.status, cancelled.response, cancelled.resolved_by) == ("cancelled", None, OWNER.user)
        assert cancelled.resolved_at is not None
        assert store.cancel(OWNER, dismissed.pk, resolved_by="ops").resolved_at == cancelled.resolved_at  # a repeat
        assert [i.pk for i in store.pending(OWNER, conversation.pk)] == [kept.pk]
        store.commit_batch(OWNER, conversation.pk, [{"id": kept.pk, "response": "ok"}])
        with pytest.raises(Conflict) as caught:
            store.cancel(OWNER, kept.pk)
        assert caught.value.code == "already_answered" and self.stored(kept.pk)["status"] == "resolved"

    @pytest.mark.django_db
    def test_cancel_is_the_owners_and_fenced(self, store: Any) -> None:
        conversation = self.new_conversation(shared=True)
        interrupt = self.ask(store, conversation)
        with pytest.raises(ConversationNotOwned):
            store.cancel(READER, interrupt.pk)
        for scope, interrupt_id in ((STRANGER, interrupt.pk), (OWNER, uuid7()), (OWNER, "nope")):
            with pytest.raises(NotFound) as caught:
                store.cancel(scope, interrupt_id)
            assert caught.value.code == "interrupt_not_found"
        self.claim_epoch(conversation, 3)
        with pytest.raises(Fenced):
            store.cancel(OWNER, interrupt.pk, epoch=2)
        for bad in ({"epoch": -1}, {"resolved_by": 5}, {"resolved_at": "later"}):
            with pytest.raises(Validation):
                store.cancel(OWNER, interrupt.pk, **bad)
        assert self.stored(interrupt.pk)["status"] == "pending"
        assert store.cancel(OWNER, interrupt.pk, epoch=3).status == "cancelled"

    @pytest.mark.django_db(transaction=True)
    def test_a_cancel_racing_a_batch_leaves_one_outcome(self, store: Any) -> None:
        for _ in range(self.RACE_ROUNDS):
            conversation = self.new_conversation()
            interrupt = self.ask(store, conversation)

            def cancel_or_answer(index: int) -> str:
                try:
                    if index % 2:
                        return store.cancel(OWNER, interrupt.pk).status
                    return store.commit_batch(OWNER, conversation.pk, [{"id": interrupt.pk, "response": "yes"}])[0].status
                except Conflict as exc:
                    return exc.code

            outcomes = run_in_threads(self.RACE_THREADS, cancel_or_answer)
            status = self.stored(interrupt.pk)["status"]
            if status == "resolved":  # every answer repeats it, every cancel is refused
                assert outcomes == ["resolved", "already_answered"] * (self.RACE_THREADS // 2), outcomes
            else:  # every cancel repeats it, every answer is refused
                assert outcomes == ["interrupt_cancelled", "cancelled"] * (self.RACE_THREADS // 2), outcomes

    # -- pending by run ---------------------------------------------------------------------

    @pytest.mark.django_db
    def test_pending_and_list_by_run_follow_the_read_rule(self, store: Any) -> None:
        conversation = self.new_conversation(shared=True)
        run, other_run = self.make_run(conversation), self.make_run(conversation)
        now = timezone.now()
        later = self.ask(store, conversation, run, requested_at=now - timedelta(minutes=1))
        earlier = self.ask(store, conversation, run, requested_at=now - timedelta(minutes=2))
        answered = self.ask(store, conversation, run, requested_at=now - timedelta(minutes=3))
        store.cancel(OWNER, answered.pk)
        self.ask(store, conversation, other_run)
        assert [i.pk for i in store.pending(READER, run_id=run.pk)] == [earlier.pk, later.pk]
        assert [i.pk for i in store.pending(OWNER, conversation.pk, run_id=str(run.pk))] == [earlier.pk, later.pk]
        assert [i.pk for i in store.list(OWNER, run_id=run.pk)] == [answered.pk, earlier.pk, later.pk]
        assert [i.pk for i in store.list(OWNER, run_id=run.pk, status="cancelled")] == [answered.pk]
        for scope, run_id in ((STRANGER, run.pk), (OWNER, uuid7()), (OWNER, "nope")):
            with pytest.raises(NotFound) as caught:
                store.pending(scope, run_id=run_id)
            assert caught.value.code == "run_not_found"
        with pytest.raises(Validation):
            store.pending(OWNER)

    # -- the kinds and their payloads -------------------------------------------------------

    @pytest.mark.django_db
    @pytest.mark.parametrize("kind", ["tool_approval", "client_tool"])
    @pytest.mark.parametrize(
        "payload",
        [
            None,
            {},
            {"name": "delete_file", "arguments": {}},
            {"tool_call_id": "", "name": "delete_file", "arguments": {}},
            {"tool_call_id": "c1", "name": 5, "arguments": {}},
            {"tool_call_id": "c1", "name": "x" * 256, "arguments": {}},
            {"tool_call_id": "c1", "name": "delete_file"},
            {"tool_call_id": "c1", "name": "delete_file", "arguments": ["/tmp/x"]},
        ],
    )
    def test_a_tool_payload_must_name_the_tool_call(self, store: Any, kind: str, payload: Any) -> None:
        conversation = self.new_conversation()
        run = self.make_run(conversation)
        with pytest.raises(Validation):
            store.create(OWNER, conversation.pk, id=uuid7(), run_id=run.pk, kind=kind, payload=payload)
        assert self.interrupt_count(conversation) == 0

    @pytest.mark.django_db
    def test_each_kind_keeps_its_documented_payload(self, store: Any) -> None:
        conversation = self.new_conversation()
        run = self.make_run(conversation)
        tool_call = {**TOOL_CALL, "description": "Delete a file."}
        for kind, payload in (("tool_approval", tool_call), ("client_tool", TOOL_CALL),
                              ("generic", {"question": "Which city?", "options": ["Paris", "Lyon"]}), ("generic", None)):
            interrupt = store.create(OWNER, conversation.pk, id=uuid7(), run_id=run.pk, kind=kind, payload=payload)
            assert (self.stored(interrupt.pk)["kind"], self.stored(interrupt.pk)["payload"]) == (kind, payload or {})

    # -- imports: caller-supplied times -----------------------------------------------------

    @pytest.mark.django_db
    def test_an_import_keeps_requested_at_and_resolved_at_and_lists_in_time_order(self, store: Any) -> None:
        conversation = self.new_conversation()
        run = self.make_run(conversation)
        base = timezone.now() - timedelta(days=3)
        imported = [self.ask(store, conversation, run, requested_at=base + timedelta(hours=h)) for h in (2, 0, 1)]
        tie = self.ask(store, conversation, run, id=uuid.UUID(int=imported[1].pk.int + 1), requested_at=base)
        assert [i.pk for i in store.list(OWNER, conversation.pk)] == [imported[1].pk, tie.pk, imported[2].pk,
                                                                       imported[0].pk]
        resolved_at = base + timedelta(hours=3)
        answers = [{"id": i.pk, "response": "ok"} for i in (*imported, tie)]
        for interrupt in store.commit_batch(OWNER, conversation.pk, answers, resolved_at=resolved_at.isoformat()):
            assert self.stored(interrupt.pk)["resolved_at"] == resolved_at
        assert self.stored(imported[1].pk)["requested_at"] == base

    @pytest.mark.django_db
    def test_bad_caller_times_are_validation_and_write_nothing(self, store: Any) -> None:
        conversation = self.new_conversation()
        run = self.make_run(conversation)
        future = timezone.now() + timedelta(seconds=app_settings.IMPORT_CLOCK_SKEW + 60)
        for requested_at in (future, "2024-01-01T00:00:00", "soon", 5):
            with pytest.raises(Validation):
                self.ask(store, conversation, run, requested_at=requested_at)
        assert self.interrupt_count(conversation) == 0
        requested = timezone.now() - timedelta(hours=1)
        interrupt = self.ask(store, conversation, run, requested_at=requested)
        for resolved_at in (requested - timedelta(seconds=1), future, "2024-01-01T00:00:00"):
            with pytest.raises(Validation):
                store.commit_batch(OWNER, conversation.pk, [{"id": interrupt.pk, "response": 1}], resolved_at=resolved_at)
            with pytest.raises(Validation):
                store.cancel(OWNER, interrupt.pk, resolved_at=resolved_at)
        assert self.stored(interrupt.pk)["status"] == "pending"

    @pytest.mark.django_db(transaction=True)
    def test_async_cancel_does_what_its_sync_method_does(self, store: Any) -> None:
        conversation = self.new_conversation()
        interrupt = self.ask(store, conversation)
        assert async_to_sync(store.acancel)(OWNER, interrupt.pk).status == "cancelled"
        assert async_to_sync(store.apending)(OWNER, conversation.pk) == []
