"""The contract of a turn store: every transition of :class:`~agent_persistence.stores.turns.TurnStore`.

Subclass :class:`TurnStoreContract` and override ``make_stores()`` to run it
against another family. Fixtures are arranged through the family's stores and
every assertion reads through store APIs only; the races run real threads (and,
for a family whose state processes share, real processes) on committed data.
"""

from __future__ import annotations

import uuid
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from ..exceptions import Busy, Conflict, ConversationNotOwned, Fenced, Gone, NotFound, PendingInterrupts, Validation
from ..ids import uuid7
from ..scope import Scope
from ..statuses import LastTurnStatus, RunStatus, SupervisionStatus
from ..stores.protocols import Seal, TurnPlan
from .actors import ALICE, BOB, MALLORY
from .family import FamilyContract, frozen_clock

OWNER, READER, STRANGER = ALICE, BOB, MALLORY  # the owner, another user of her tenant, another tenant
AGENTS = frozenset({"helper", "other"})
COMPLETED = Seal(RunStatus.COMPLETED, SupervisionStatus.DONE, LastTurnStatus.COMPLETE)
CANCELLED = Seal(RunStatus.ABORTED, SupervisionStatus.DONE, LastTurnStatus.CANCELLED)
ERRORED = Seal(RunStatus.FAILED, SupervisionStatus.ERRORED, LastTurnStatus.ERRORED)


def _begin_in_worker(target: tuple[Any, uuid.UUID, int]) -> str:
    """One racer of :meth:`TurnStoreContract.test_concurrent_begins_of_a_new_conversation_admit_one`."""
    turns, conversation_id, index = target
    try:
        turns.begin(OWNER, conversation_id, content=f"start {index}", known_agents=AGENTS, agent="helper")
    except Busy:
        return "busy"
    return "won"


class TurnStoreContract(FamilyContract):
    """The behaviour every turn store must have, on every database it supports."""

    RACE_ROUNDS = 6
    RACE_THREADS = 8

    @pytest.fixture
    def turns(self, stores: Any) -> Any:
        return self.family.turns

    # -- helpers, through the family's stores -------------------------------------------------

    def begin(self, turns: Any, conversation_id: Any = None, *, scope: Scope = OWNER, **options: Any) -> TurnPlan:
        options.setdefault("agent", "helper")
        return turns.begin(scope, conversation_id or uuid.uuid4(), content=options.pop("content", "hello"),
                           known_agents=AGENTS, **options)

    def dead_turn(self, turns: Any, conversation_id: Any = None, **options: Any) -> TurnPlan:
        """A turn whose producer stopped heartbeating a minute ago."""
        with frozen_clock(timezone.now() - timedelta(minutes=1)):
            return self.begin(turns, conversation_id, **options)

    def messages(self, conversation_id: Any, scope: Scope = OWNER) -> list[Any]:
        return self.family.conversations.list_messages(scope, conversation_id).items

    def event_types(self, conversation_id: Any) -> list[str]:
        return [event.type for event in self.family.events.list(OWNER, conversation_id, limit=1000).events]

    def run_status(self, run_id: Any) -> str:
        return self.family.runs.get(OWNER, run_id).status

    def ask(self, plan: TurnPlan, *, key: str = "q") -> uuid.UUID:
        interrupt_id = uuid.uuid5(uuid.NAMESPACE_URL, f"{plan.message_id}:{key}")
        self.family.interrupts.create(
            OWNER, plan.conversation_id, id=interrupt_id, run_id=plan.run_id, kind="generic", payload={"q": key},
            epoch=plan.epoch,
        )
        return interrupt_id

    def seal(self, turns: Any, plan: TurnPlan, text: str = "answer", seal: Seal = COMPLETED, **options: Any) -> bool:
        return turns.seal(
            plan.scope, plan.conversation_id, message_id=plan.message_id, run_id=plan.run_id, epoch=plan.epoch,
            message={"content": text}, seal=seal, stop_reason=options.pop("stop_reason", "completed"), **options,
        )

    # -- begin ----------------------------------------------------------------------------------

    def test_begin_creates_the_conversation_stores_the_user_message_and_claims_a_running_run(self, turns: Any) -> None:
        conversation_id = uuid.uuid4()
        plan = self.begin(turns, conversation_id, content="plan my trip", metadata={"source": "web"})
        assert (plan.conversation_id, plan.agent_name, plan.resumed, plan.epoch) == (conversation_id, "helper", False, 1)
        assert [(m.role, m.content, m.metadata) for m in plan.transcript] == [("user", "plan my trip", {"source": "web"})]
        conversation = self.family.conversations.get(OWNER, conversation_id)
        assert (conversation.owner, conversation.agent, conversation.last_turn_status) == (OWNER.user, "helper", "running")
        assert [message.role for message in self.messages(conversation_id)] == ["user"]
        assert self.run_status(plan.run_id) == "running"
        view = turns.read_turn(OWNER, conversation_id)
        assert (view.state, view.message_id, view.run_id, view.epoch) == ("alive", plan.message_id, plan.run_id, 1)
        assert self.event_types(conversation_id) == ["status_running"]

    def test_a_live_turn_refuses_a_second_begin_with_its_occupant_and_stores_nothing(self, turns: Any) -> None:
        plan = self.begin(turns)
        with pytest.raises(Busy) as refused:
            self.begin(turns, plan.conversation_id, content="again")
        assert refused.value.details["occupant"]["message_id"] == str(plan.message_id)
        assert len(self.messages(plan.conversation_id)) == 1
        assert self.family.runs.list(OWNER, plan.conversation_id).total == 1

    def test_begin_after_a_sealed_turn_claims_the_next_epoch(self, turns: Any) -> None:
        first = self.begin(turns)
        assert self.seal(turns, first)
        second = self.begin(turns, first.conversation_id, agent=None)
        assert (second.epoch, second.agent_name) == (2, "helper")
        assert [message.role for message in second.transcript] == ["user", "assistant", "user"]

    def test_unknown_agent_is_refused_before_anything_is_written(self, turns: Any) -> None:
        conversation_id = uuid.uuid4()
        with pytest.raises(Validation) as refused:
            self.begin(turns, conversation_id, agent="nobody")
        assert refused.value.code == "unknown_agent"
        with pytest.raises(Validation):
            self.begin(turns, conversation_id, agent=None)  # a new conversation has no agent of its own
        with pytest.raises(NotFound):
            self.family.conversations.get(OWNER, conversation_id)

    def test_an_id_the_caller_may_not_see_answers_like_an_unknown_one(self, turns: Any) -> None:
        plan = self.begin(turns)
        self.seal(turns, plan)
        for scope in (READER, STRANGER):
            with pytest.raises(Validation) as without_agent:
                self.begin(turns, plan.conversation_id, scope=scope, agent=None)
            assert without_agent.value.code == "unknown_agent"
            with pytest.raises(NotFound):
                self.begin(turns, plan.conversation_id, scope=scope)
        self.family.conversations.share(OWNER, plan.conversation_id)
        with pytest.raises(ConversationNotOwned):
            self.begin(turns, plan.conversation_id, scope=READER)
        assert len(self.messages(plan.conversation_id)) == 2

    def test_pending_interrupts_refuse_new_input(self, turns: Any) -> None:
        plan = self.begin(turns)
        interrupt_id = self.ask(plan)
        assert turns.suspend(OWNER, plan.conversation_id, message_id=plan.message_id, run_id=plan.run_id, epoch=plan.epoch)
        with pytest.raises(PendingInterrupts) as refused:
            self.begin(turns, plan.conversation_id, content="new question")
        assert refused.value.details["pending"] == [str(interrupt_id)]
        assert len(self.messages(plan.conversation_id)) == 1

    def test_begin_over_a_dead_producer_records_it_as_lost(self, turns: Any) -> None:
        dead = self.dead_turn(turns)
        plan = self.begin(turns, dead.conversation_id, content="are you there?")
        assert plan.epoch == dead.epoch + 1
        assert self.run_status(dead.run_id) == "aborted"
        assert self.family.runs.get(OWNER, dead.run_id).error["code"] == "producer_lost"
        assert self.event_types(dead.conversation_id) == ["status_running", "producer_lost", "status_running"]
        assert not self.seal(turns, dead)  # the dead producer, waking up, is fenced

    def test_begin_with_a_taken_message_id_stores_nothing(self, turns: Any) -> None:
        plan = self.begin(turns)
        self.seal(turns, plan)
        other = uuid.uuid4()
        with pytest.raises(Conflict):
            self.begin(turns, other, user_message_id=plan.transcript[0].pk)
        with pytest.raises(NotFound):
            self.family.conversations.get(OWNER, other)

    def test_begin_under_a_taken_answer_id_is_message_exists_and_writes_nothing(self, turns: Any) -> None:
        plan = self.begin(turns)
        self.seal(turns, plan)
        taken = [plan.message_id, plan.transcript[0].pk]
        for message_id in taken:
            with pytest.raises(Conflict) as refused:
                self.begin(turns, plan.conversation_id, content="again", message_id=message_id)
            assert refused.value.code == "message_exists"
        same = uuid.uuid4()
        with pytest.raises(Conflict) as refused:
            self.begin(turns, plan.conversation_id, content="again", message_id=same, user_message_id=same)
        assert refused.value.code == "message_exists"
        assert len(self.messages(plan.conversation_id)) == 2
        assert turns.read_turn(OWNER, plan.conversation_id).epoch == plan.epoch

    def test_begin_under_the_answer_id_of_a_turn_running_elsewhere_is_message_exists(self, turns: Any) -> None:
        """No answer is written yet, but a run answers under that id: two seals under one id would lose one answer."""
        running = self.begin(turns)
        other = uuid.uuid4()
        with pytest.raises(Conflict) as refused:
            self.begin(turns, other, content="mine", message_id=running.message_id)
        assert refused.value.code == "message_exists"
        with pytest.raises(NotFound):
            self.family.conversations.get(OWNER, other)
        with pytest.raises(Conflict) as refused:  # nor may a question take the id the running answer will have
            self.begin(turns, other, content="mine", user_message_id=running.message_id)
        assert refused.value.code == "message_exists"
        assert self.seal(turns, running)

    # -- seal -----------------------------------------------------------------------------------

    def test_seal_writes_the_answer_the_run_the_row_the_conversation_and_the_event(self, turns: Any) -> None:
        plan = self.begin(turns)
        assert self.seal(turns, plan, "Paris.")
        answer = self.messages(plan.conversation_id)[-1]
        assert (answer.pk, answer.role, answer.content, answer.run_id) == (plan.message_id, "assistant", "Paris.", plan.run_id)
        assert answer.metadata == {"stop_reason": "completed"}
        assert self.run_status(plan.run_id) == "completed"
        assert self.family.conversations.get(OWNER, plan.conversation_id).last_turn_status == "complete"
        view = turns.read_turn(OWNER, plan.conversation_id)
        assert view.state == "done" and view.final["message"]["content"] == "Paris."
        assert self.event_types(plan.conversation_id)[-1] == "status_idle"

    def test_an_errored_seal_keeps_the_error(self, turns: Any) -> None:
        plan = self.begin(turns)
        error = {"code": "agent_error", "message": "boom"}
        assert self.seal(turns, plan, "half", ERRORED, stop_reason="errored", error=error)
        view = turns.read_turn(OWNER, plan.conversation_id)
        assert (view.state, view.final["error"], view.final["stop_reason"]) == ("errored", error, "errored")
        assert self.family.runs.get(OWNER, plan.run_id).error == error

    def test_a_turn_is_sealed_once(self, turns: Any) -> None:
        plan = self.begin(turns)
        assert self.seal(turns, plan)
        assert not self.seal(turns, plan, "again")
        assert len(self.messages(plan.conversation_id)) == 2

    def test_a_seal_of_a_deleted_conversation_writes_nothing(self, turns: Any) -> None:
        plan = self.begin(turns)
        self.family.conversations.delete(OWNER, plan.conversation_id)
        assert not self.seal(turns, plan)
        with pytest.raises(NotFound):
            self.family.conversations.get(OWNER, plan.conversation_id)

    # -- suspend and continue -------------------------------------------------------------------

    def test_suspend_without_pending_questions_goes_on(self, turns: Any) -> None:
        plan = self.begin(turns)
        assert not turns.suspend(OWNER, plan.conversation_id, message_id=plan.message_id, run_id=plan.run_id, epoch=plan.epoch)
        assert turns.read_turn(OWNER, plan.conversation_id).state == "alive"

    def test_suspend_parks_the_run_and_readers_see_the_questions(self, turns: Any) -> None:
        plan = self.begin(turns)
        interrupt_id = self.ask(plan)
        assert turns.suspend(OWNER, plan.conversation_id, message_id=plan.message_id, run_id=plan.run_id, epoch=plan.epoch)
        assert self.run_status(plan.run_id) == "interrupted"
        view = turns.read_turn(OWNER, plan.conversation_id)
        assert view.state == "interrupted" and [item["id"] for item in view.interrupts] == [str(interrupt_id)]
        with pytest.raises(Fenced):
            turns.suspend(OWNER, plan.conversation_id, message_id=plan.message_id, run_id=plan.run_id, epoch=plan.epoch + 5)

    def test_answers_continue_an_interrupted_run_with_a_new_one(self, turns: Any) -> None:
        plan = self.begin(turns)
        interrupt_id = self.ask(plan)
        turns.suspend(OWNER, plan.conversation_id, message_id=plan.message_id, run_id=plan.run_id, epoch=plan.epoch)
        continuation = turns.continue_after_answers(OWNER, plan.conversation_id, [{"id": str(interrupt_id), "response": "yes"}])
        assert [interrupt.status for interrupt in continuation.interrupts] == ["resolved"]
        resumed = continuation.plan
        assert resumed is not None and not continuation.took_over
        assert (resumed.message_id, resumed.resumed, resumed.epoch) == (plan.message_id, True, plan.epoch + 1)
        assert resumed.run_id != plan.run_id and resumed.answers == {str(interrupt_id): "yes"}
        assert self.run_status(plan.run_id) == "completed" and self.run_status(resumed.run_id) == "running"
        assert turns.read_turn(OWNER, plan.conversation_id).run_id == resumed.run_id
        again = turns.continue_after_answers(OWNER, plan.conversation_id, [{"id": str(interrupt_id), "response": "yes"}])
        assert again.plan is None  # a repeated batch starts nothing

    def test_answers_for_a_live_producer_leave_the_turn_to_it(self, turns: Any) -> None:
        plan = self.begin(turns)
        interrupt_id = self.ask(plan)
        continuation = turns.continue_after_answers(OWNER, plan.conversation_id, [{"id": str(interrupt_id), "response": 1}])
        assert continuation.plan is None
        assert turns.answers(plan.conversation_id, plan.message_id) == {str(interrupt_id): 1}

    def test_answers_to_a_dead_producer_store_and_resume_in_one_transition(self, turns: Any) -> None:
        plan = self.dead_turn(turns)
        interrupt_id = self.ask_dead(plan)
        continuation = turns.continue_after_answers(OWNER, plan.conversation_id, [{"id": str(interrupt_id), "response": "ok"}])
        assert continuation.took_over and continuation.plan is not None
        resumed = continuation.plan
        assert resumed.epoch == plan.epoch + 1 and resumed.answers == {str(interrupt_id): "ok"}
        assert self.run_status(plan.run_id) == "aborted"
        view = turns.read_turn(OWNER, plan.conversation_id)
        assert (view.state, view.run_id, view.epoch) == ("alive", resumed.run_id, resumed.epoch)

    def test_a_refused_batch_stores_no_answer_and_claims_nothing(self, turns: Any) -> None:
        plan = self.dead_turn(turns)
        first, second = self.ask_dead(plan, key="a"), self.ask_dead(plan, key="b")
        with pytest.raises(NotFound):  # one entry names no interrupt of the conversation: the whole batch is refused
            turns.continue_after_answers(
                OWNER, plan.conversation_id, [{"id": str(first), "response": "ok"}, {"id": str(uuid7()), "response": 1}]
            )
        with pytest.raises(Validation):  # an empty batch while questions wait settles nothing
            turns.continue_after_answers(OWNER, plan.conversation_id, [])
        assert [item.status for item in self.family.interrupts.pending(OWNER, plan.conversation_id)] == ["pending", "pending"]
        assert turns.read_turn(OWNER, plan.conversation_id).run_id == plan.run_id
        self.family.conversations.share(OWNER, plan.conversation_id)
        with pytest.raises(ConversationNotOwned):
            turns.continue_after_answers(READER, plan.conversation_id, [{"id": str(first), "response": 1}, {"id": str(second), "response": 2}])
        assert len(self.family.interrupts.pending(OWNER, plan.conversation_id)) == 2

    def ask_dead(self, plan: TurnPlan, *, key: str = "q") -> uuid.UUID:
        """An interrupt the dead producer raised before it died (its heartbeat stays old)."""
        with frozen_clock(timezone.now() - timedelta(seconds=50)):
            return self.ask(plan, key=key)

    # -- resume, close out, force release ---------------------------------------------------------

    def test_resume_takes_over_a_dead_turn_with_a_new_run_that_readers_see(self, turns: Any) -> None:
        dead = self.dead_turn(turns)
        plan = turns.resume(OWNER, dead.conversation_id, replica="replica-b")
        assert (plan.message_id, plan.resumed, plan.epoch) == (dead.message_id, True, dead.epoch + 1)
        assert plan.run_id != dead.run_id and self.run_status(dead.run_id) == "aborted"
        view = turns.read_turn(OWNER, dead.conversation_id)
        assert (view.state, view.run_id, view.epoch, view.replica) == ("alive", plan.run_id, plan.epoch, "replica-b")
        assert self.event_types(dead.conversation_id)[-2:] == ["producer_lost", "status_running"]
        assert not self.seal(turns, dead) and self.seal(turns, plan)

    def test_resume_refuses_a_live_turn_a_finished_one_and_other_scopes(self, turns: Any) -> None:
        plan = self.begin(turns)
        with pytest.raises(Busy):
            turns.resume(OWNER, plan.conversation_id)
        self.seal(turns, plan)
        with pytest.raises(Gone):
            turns.resume(OWNER, plan.conversation_id)
        dead = self.dead_turn(turns)
        with pytest.raises(Gone):
            turns.resume(OWNER, dead.conversation_id, message_id=uuid.uuid4())
        for scope in (READER, STRANGER):
            with pytest.raises(NotFound):
                turns.resume(scope, dead.conversation_id)

    def test_close_out_ends_a_dead_turn_with_its_partial_answer(self, turns: Any) -> None:
        dead = self.dead_turn(turns)
        with frozen_clock(timezone.now() - timedelta(seconds=55)):
            self.family.recordings.put(dead.conversation_id, message_id=dead.message_id, index=7,
                                       message={"content": "half an ans"}, epoch=dead.epoch)
        assert turns.close_out(OWNER, dead.conversation_id, seal=CANCELLED, stop_reason="cancelled")
        answer = self.messages(dead.conversation_id)[-1]
        assert (answer.pk, answer.content) == (dead.message_id, "half an ans")
        assert self.run_status(dead.run_id) == "aborted"
        assert self.family.conversations.get(OWNER, dead.conversation_id).last_turn_status == "cancelled"
        assert not self.seal(turns, dead)
        assert not turns.close_out(OWNER, dead.conversation_id, seal=CANCELLED, stop_reason="cancelled")

    def test_close_out_refuses_a_live_turn(self, turns: Any) -> None:
        plan = self.begin(turns)
        with pytest.raises(Busy):
            turns.close_out(OWNER, plan.conversation_id, seal=ERRORED, stop_reason="errored")

    def test_force_release_fences_the_producer_and_aborts_its_runs(self, turns: Any) -> None:
        plan = self.begin(turns)
        assert turns.force_release(plan.conversation_id)
        assert self.run_status(plan.run_id) == "aborted"
        assert self.family.runs.get(OWNER, plan.run_id).error["code"] == "force_released"
        assert turns.read_turn(OWNER, plan.conversation_id).state == "errored"
        assert self.family.conversations.get(OWNER, plan.conversation_id).last_turn_status == "errored"
        assert not self.seal(turns, plan)
        assert not turns.force_release(plan.conversation_id)
        assert self.begin(turns, plan.conversation_id).epoch == plan.epoch + 2

    def test_force_release_records_the_reason_it_is_given(self, turns: Any) -> None:
        plan = self.begin(turns)
        reason = {"code": "resume_attempts_exhausted", "message": "Resumed 3 times."}
        assert turns.force_release(plan.conversation_id, error=reason)
        assert self.family.runs.get(OWNER, plan.run_id).error == reason
        other = self.begin(turns)
        with pytest.raises(Validation):
            turns.force_release(other.conversation_id, error={"code": "x"})
        assert self.run_status(other.run_id) == "running"

    # -- reads ----------------------------------------------------------------------------------

    def test_read_turn_hides_the_conversation_from_other_scopes(self, turns: Any) -> None:
        plan = self.begin(turns)
        for scope in (READER, STRANGER):
            with pytest.raises(NotFound):
                turns.read_turn(scope, plan.conversation_id)
        with pytest.raises(NotFound):
            turns.read_turn(OWNER, uuid.uuid4())
        assert turns.read_turn(None, plan.conversation_id).run_id == plan.run_id
        idle = self.family.conversations.create(OWNER)
        assert turns.read_turn(OWNER, idle.pk).state == "idle"

    def test_stop_requests_scope_and_dead_turns(self, turns: Any) -> None:
        plan, other = self.begin(turns), self.begin(turns)
        self.family.runs.request_cancel(OWNER, plan.run_id)
        assert turns.stop_requested([plan.run_id, other.run_id, uuid7()]) == {plan.run_id}
        assert turns.stop_requested([]) == set()
        assert turns.scope_of(plan.conversation_id) == OWNER
        with pytest.raises(NotFound):
            turns.scope_of(uuid.uuid4())
        dead = self.dead_turn(turns)
        assert (OWNER, dead.conversation_id, dead.message_id) in turns.dead_turns(limit=100)
        assert all(conversation_id != plan.conversation_id for _, conversation_id, _ in turns.dead_turns())

    # -- races ----------------------------------------------------------------------------------

    @pytest.mark.django_db(transaction=True)
    def test_concurrent_begins_of_a_new_conversation_admit_one(self) -> None:
        """Racers start the first turn of one new conversation: one wins, the rest are Busy, one message stays."""
        tally: Counter[str] = Counter()
        for _ in range(self.RACE_ROUNDS):
            conversation_id = uuid.uuid4()
            outcomes = self.family.run_in_processes(
                self.RACE_THREADS, lambda index: _begin_in_worker((self.family.turns, conversation_id, index))
            )
            tally.update(outcomes)
            assert sorted(outcomes) == ["busy"] * (self.RACE_THREADS - 1) + ["won"], outcomes
            assert [message.role for message in self.messages(conversation_id)] == ["user"]
        assert tally["won"] == self.RACE_ROUNDS

    @pytest.mark.django_db(transaction=True)
    def test_concurrent_resumes_of_a_dead_turn_admit_one(self) -> None:
        for _ in range(self.RACE_ROUNDS):
            dead = self.dead_turn(self.family.turns)

            def resume(index: int) -> str:
                try:
                    self.family.turns.resume(OWNER, dead.conversation_id, replica=f"r{index}")
                except (Busy, Gone):
                    return "refused"
                return "won"

            outcomes = self.family.run_in_processes(self.RACE_THREADS, resume)
            assert sorted(outcomes) == ["refused"] * (self.RACE_THREADS - 1) + ["won"], outcomes
            assert self.family.runs.list(OWNER, dead.conversation_id).total == 2

    # -- hand-off at a shutdown ----------------------------------------------------------------------

    def hand_off(self, turns: Any, plan: TurnPlan) -> int | None:
        return turns.hand_off(plan.scope, plan.conversation_id, message_id=plan.message_id, run_id=plan.run_id,
                              epoch=plan.epoch)

    def test_a_hand_off_releases_the_turn_at_the_next_epoch_and_the_old_epoch_writes_nothing_more(self, turns: Any) -> None:
        plan = self.begin(turns)
        self.family.recordings.put(plan.conversation_id, message_id=plan.message_id, index=4,
                                   message={"content": "half an"}, epoch=plan.epoch)
        self.family.checkpoints.save(plan.conversation_id, {"message_id": str(plan.message_id), "text": "half an"},
                                     epoch=plan.epoch)
        assert self.hand_off(turns, plan) == plan.epoch + 1
        view = turns.read_turn(OWNER, plan.conversation_id)
        assert (view.state, view.message_id, view.epoch) == ("handing_off", plan.message_id, plan.epoch + 1)
        assert view.record["message"]["content"] == "half an" and view.final is None
        run = self.family.runs.get(OWNER, plan.run_id)
        assert (run.status, run.error["code"]) == ("aborted", "handed_off")
        assert self.event_types(plan.conversation_id) == ["status_running", "handed_off"]
        assert self.family.conversations.get(OWNER, plan.conversation_id).last_turn_status == "running"
        # The fence: the producer that handed off can write nothing at its epoch any more.
        assert self.hand_off(turns, plan) is None
        assert not self.seal(turns, plan)
        with pytest.raises(Fenced):
            turns.suspend(OWNER, plan.conversation_id, message_id=plan.message_id, run_id=plan.run_id, epoch=plan.epoch)
        with pytest.raises(Fenced):
            self.family.recordings.put(plan.conversation_id, message_id=plan.message_id, index=5,
                                       message={"content": "half an answer"}, epoch=plan.epoch)
        assert self.family.recordings.put_many([{
            "conversation_id": plan.conversation_id, "message_id": plan.message_id, "index": 5,
            "message": {"content": "half an answer"}, "epoch": plan.epoch,
        }]) == {plan.conversation_id}
        with pytest.raises(Fenced):
            self.family.checkpoints.save(plan.conversation_id, {"text": "overwritten"}, epoch=plan.epoch)
        assert self.family.supervision.heartbeat_many([(plan.conversation_id, plan.epoch)]) == {plan.conversation_id}
        assert turns.read_turn(OWNER, plan.conversation_id).record["message"]["content"] == "half an"
        assert len(self.messages(plan.conversation_id)) == 1

    def test_a_handed_off_turn_is_resumed_at_once_from_its_checkpoint_without_a_lost_producer(self, turns: Any) -> None:
        plan = self.begin(turns)
        self.family.recordings.put(plan.conversation_id, message_id=plan.message_id, index=9,
                                   message={"content": "half"}, epoch=plan.epoch)
        checkpoint = {"message_id": str(plan.message_id), "text": "half", "tool_results": {"call_1": 42}}
        self.family.checkpoints.save(plan.conversation_id, checkpoint, epoch=plan.epoch)
        released_at = self.hand_off(turns, plan)
        # No DEAD_AFTER to wait for: the reaper lists it now and a resume claims it now.
        assert (OWNER, plan.conversation_id, plan.message_id) in turns.dead_turns(limit=100)
        resumed = turns.resume(OWNER, plan.conversation_id, replica="replica-b")
        assert (resumed.message_id, resumed.resumed, resumed.epoch) == (plan.message_id, True, released_at + 1)
        assert (resumed.start_index, resumed.checkpoint["tool_results"]) == (9, {"call_1": 42})
        view = turns.read_turn(OWNER, plan.conversation_id)
        assert (view.state, view.run_id, view.epoch, view.replica) == ("alive", resumed.run_id, resumed.epoch, "replica-b")
        assert self.event_types(plan.conversation_id) == ["status_running", "handed_off", "status_running"]
        errors = [run.error["code"] for run in self.family.runs.list(OWNER, plan.conversation_id).items if run.error]
        assert errors == ["handed_off"]  # a hand-off is not a failed resume
        assert all(conversation_id != plan.conversation_id for _, conversation_id, _ in turns.dead_turns())
        with pytest.raises(Busy):
            turns.resume(OWNER, plan.conversation_id)
        assert self.seal(turns, resumed, "half and the rest")
        assert self.messages(plan.conversation_id)[-1].content == "half and the rest"

    def test_a_handed_off_turn_refuses_a_new_turn_until_dead_after_and_can_be_closed_out_at_once(self, turns: Any) -> None:
        plan = self.begin(turns)
        self.hand_off(turns, plan)
        with pytest.raises(Busy) as refused:
            self.begin(turns, plan.conversation_id, content="again")
        assert refused.value.details["occupant"]["message_id"] == str(plan.message_id)
        later = timezone.now() + timedelta(seconds=60)
        with frozen_clock(later):
            replacing = self.begin(turns, plan.conversation_id, content="nobody took it")
        assert replacing.epoch == plan.epoch + 2
        other = self.begin(turns)
        self.hand_off(turns, other)
        assert turns.close_out(OWNER, other.conversation_id, seal=CANCELLED, stop_reason="cancelled")
        assert turns.read_turn(OWNER, other.conversation_id).state == "done"
        assert "producer_lost" not in self.event_types(other.conversation_id)

    def test_a_hand_off_of_a_taken_over_or_deleted_turn_writes_nothing(self, turns: Any) -> None:
        dead = self.dead_turn(turns)
        resumed = turns.resume(OWNER, dead.conversation_id)
        assert self.hand_off(turns, dead) is None
        assert turns.read_turn(OWNER, dead.conversation_id).state == "alive"
        assert self.run_status(resumed.run_id) == "running"
        gone = self.begin(turns)
        self.family.conversations.delete(OWNER, gone.conversation_id)
        assert self.hand_off(turns, gone) is None

    @pytest.mark.django_db(transaction=True)
    def test_a_hand_off_racing_resumes_of_its_turn_admits_one_producer(self) -> None:
        """The producer hands off while resumers race for its (dead-looking) turn: exactly one resume wins,
        before the hand-off (which is then fenced) or after it (claiming the handed-off turn)."""
        tally: Counter[str] = Counter()
        for _ in range(self.RACE_ROUNDS):
            dead = self.dead_turn(self.family.turns)

            def race(index: int) -> str:
                if index == 0:
                    return "handed off" if self.hand_off(self.family.turns, dead) else "fenced"
                try:
                    self.family.turns.resume(OWNER, dead.conversation_id, replica=f"r{index}")
                except (Busy, Gone):
                    return "refused"
                return "won"

            outcomes = self.family.run_in_processes(self.RACE_THREADS, race)
            tally.update(outcomes[:1])
            assert sorted(outcomes[1:]) == ["refused"] * (self.RACE_THREADS - 2) + ["won"], outcomes
            assert self.family.runs.list(OWNER, dead.conversation_id).total == 2
            view = self.family.turns.read_turn(OWNER, dead.conversation_id)
            assert view.state == "alive" and not self.seal(self.family.turns, dead)
        assert set(tally) <= {"handed off", "fenced"}

    # -- hand-offs of a draining process, in one call ---------------------------------------------------------

    def hand_off_item(self, plan: TurnPlan, **changes: Any) -> dict[str, Any]:
        return {"scope": plan.scope, "conversation_id": plan.conversation_id, "message_id": plan.message_id,
                "run_id": plan.run_id, "epoch": plan.epoch, **changes}

    def test_hand_off_many_releases_each_live_turn_and_leaves_out_the_taken_over_and_the_deleted(self, turns: Any) -> None:
        live = [self.begin(turns) for _ in range(3)]
        dead = self.dead_turn(turns)
        resumed = turns.resume(OWNER, dead.conversation_id, replica="replica-b")
        gone = self.begin(turns)
        self.family.conversations.delete(OWNER, gone.conversation_id)
        items = [self.hand_off_item(live[0], in_flight="model"), self.hand_off_item(dead), self.hand_off_item(live[1]),
                 self.hand_off_item(gone), self.hand_off_item(live[2], in_flight="tool")]
        released = turns.hand_off_many(items)
        assert released == {plan.conversation_id: plan.epoch + 1 for plan in live}
        for plan in live:
            view = turns.read_turn(OWNER, plan.conversation_id)
            assert (view.state, view.message_id, view.epoch) == ("handing_off", plan.message_id, plan.epoch + 1)
            assert self.event_types(plan.conversation_id) == ["status_running", "handed_off"]
            run = self.family.runs.get(OWNER, plan.run_id)
            assert (run.status, run.error["code"]) == ("aborted", "handed_off")
            assert not self.seal(turns, plan)  # fenced: the producer that handed off writes nothing more
        in_flight = [event.data.get("in_flight") for plan in live
                     for event in self.family.events.list(OWNER, plan.conversation_id, limit=10).events
                     if event.type == "handed_off"]
        assert in_flight == ["model", None, "tool"]
        # The taken-over turn is its new producer's; nothing of the batch reached it.
        view = turns.read_turn(OWNER, dead.conversation_id)
        assert (view.state, view.run_id, view.epoch) == ("alive", resumed.run_id, resumed.epoch)
        assert self.run_status(resumed.run_id) == "running"
        # A second batch of the same epochs is fenced throughout; the released turns resume at once.
        assert turns.hand_off_many(items) == {}
        for plan in live:
            assert turns.resume(OWNER, plan.conversation_id, replica="replica-c").epoch == plan.epoch + 2
        assert turns.hand_off_many([]) == {}

    def test_hand_off_many_of_turns_all_still_held_releases_every_one(self, turns: Any) -> None:
        """A drain's usual batch (every turn at its producer's epoch): all released, each as one alone would be."""
        live = [self.begin(turns) for _ in range(4)]
        items = [self.hand_off_item(plan, in_flight="model" if number % 2 else None) for number, plan in enumerate(live)]
        assert turns.hand_off_many(list(reversed(items))) == {plan.conversation_id: plan.epoch + 1 for plan in live}
        for number, plan in enumerate(live):
            view = turns.read_turn(OWNER, plan.conversation_id)
            assert (view.state, view.message_id, view.epoch) == ("handing_off", plan.message_id, plan.epoch + 1)
            events = self.family.events.list(OWNER, plan.conversation_id, limit=10).events
            assert [event.type for event in events] == ["status_running", "handed_off"]
            assert events[-1].data.get("in_flight") == ("model" if number % 2 else None)
            assert (self.family.runs.get(OWNER, plan.run_id).status, self.run_status(plan.run_id)) == ("aborted", "aborted")
            assert not self.seal(turns, plan)
            assert turns.resume(OWNER, plan.conversation_id, replica="replica-b").epoch == plan.epoch + 2

    # -- claims of a hand-off listener, in one call --------------------------------------------------------

    def handed_off_turn(self, turns: Any, index: int = 0) -> TurnPlan:
        """A turn released by its producer's shutdown, with a recording at ``index`` and a checkpoint."""
        plan = self.begin(turns)
        self.family.recordings.put(plan.conversation_id, message_id=plan.message_id, index=index,
                                   message={"content": "half"}, epoch=plan.epoch)
        self.family.checkpoints.save(plan.conversation_id, {"message_id": str(plan.message_id), "text": "half"},
                                     epoch=plan.epoch)
        assert self.hand_off(turns, plan) == plan.epoch + 1
        return plan

    def test_resume_many_claims_each_handed_off_turn_as_resume_would(self, turns: Any) -> None:
        alone, *together = [self.handed_off_turn(turns, index) for index in (3, 5, 7, 9)]
        expected = turns.resume(OWNER, alone.conversation_id, message_id=alone.message_id, replica="replica-b")
        plans = turns.resume_many([{"conversation_id": plan.conversation_id, "message_id": plan.message_id}
                                   for plan in reversed(together)], replica="replica-b")
        assert sorted(plans) == sorted(plan.conversation_id for plan in together)
        for index, plan in zip((5, 7, 9), together):
            claimed = plans[plan.conversation_id]
            assert (claimed.scope, claimed.message_id, claimed.epoch, claimed.agent_name, claimed.resumed) == (
                OWNER, plan.message_id, plan.epoch + 2, expected.agent_name, True)
            assert claimed.run_id not in (plan.run_id, expected.run_id)
            assert (claimed.start_index, claimed.checkpoint) == (index, {"message_id": str(plan.message_id), "text": "half"})
            assert [m.content for m in claimed.transcript] == [m.content for m in expected.transcript]
            view = turns.read_turn(OWNER, plan.conversation_id)
            assert (view.state, view.run_id, view.epoch) == ("alive", claimed.run_id, plan.epoch + 2)
            assert self.event_types(plan.conversation_id) == self.event_types(alone.conversation_id) == [
                "status_running", "handed_off", "status_running"]
            assert self.run_status(claimed.run_id) == "running" and self.run_status(plan.run_id) == "aborted"
            assert self.family.conversations.get(OWNER, plan.conversation_id).last_turn_status == "running"
            # Claimed at its epoch: the new producer writes; a second claim is refused.
            assert self.seal(turns, claimed)
        again = turns.resume_many([{"conversation_id": together[0].conversation_id, "message_id": together[0].message_id}])
        assert isinstance(again[together[0].conversation_id], Gone)
        assert turns.resume_many([]) == {}

    def test_resume_many_refuses_each_turn_that_is_not_handed_off_on_its_own_terms(self, turns: Any) -> None:
        handed = self.handed_off_turn(turns)
        live = self.begin(turns)
        dead = self.dead_turn(turns)
        gone = self.handed_off_turn(turns)
        self.family.conversations.delete(OWNER, gone.conversation_id)
        other = self.handed_off_turn(turns)  # announced with another turn's message id
        claims = [{"conversation_id": plan.conversation_id, "message_id": plan.message_id}
                  for plan in (handed, live, dead, gone)] + [{"conversation_id": other.conversation_id,
                                                             "message_id": uuid.uuid4()}]
        results = turns.resume_many(claims, replica="replica-b")
        assert results[handed.conversation_id].epoch == handed.epoch + 2
        assert isinstance(results[live.conversation_id], Busy)
        assert results[dead.conversation_id].epoch == dead.epoch + 1  # a dead producer's turn, taken over as resume does
        assert isinstance(results[gone.conversation_id], NotFound)
        assert isinstance(results[other.conversation_id], Gone)
        assert turns.read_turn(OWNER, live.conversation_id).run_id == live.run_id
        assert turns.read_turn(OWNER, other.conversation_id).state == "handing_off"

    def test_resume_many_refuses_an_invalid_or_repeated_claim_and_writes_nothing(self, turns: Any) -> None:
        plan = self.handed_off_turn(turns)
        claim = {"conversation_id": plan.conversation_id, "message_id": plan.message_id}
        for claims in ([claim, claim], [claim, {"conversation_id": "nope", "message_id": plan.message_id}],
                       [claim, {"conversation_id": uuid.uuid4()}], [claim, "x"], claim):
            with pytest.raises(Validation):
                turns.resume_many(claims)  # type: ignore[arg-type]
        assert turns.read_turn(OWNER, plan.conversation_id).state == "handing_off"
        assert self.event_types(plan.conversation_id) == ["status_running", "handed_off"]

    @pytest.mark.django_db(transaction=True)
    def test_a_batch_claim_racing_single_claims_admits_one_producer_for_each_turn(self) -> None:
        """A listener claims its share of an announcement in one call while other processes claim the same turns
        one at a time: each turn gets exactly one new producer."""
        width = 3
        for _ in range(self.RACE_ROUNDS):
            handed = [self.handed_off_turn(self.family.turns) for _ in range(width)]

            def race(index: int) -> str:
                if index == 0:
                    results = self.family.turns.resume_many(
                        [{"conversation_id": plan.conversation_id, "message_id": plan.message_id} for plan in handed],
                        replica="batch")
                    return ",".join(str(number) for number, plan in enumerate(handed)
                                    if isinstance(results[plan.conversation_id], TurnPlan))
                plan = handed[index % width]
                try:
                    self.family.turns.resume(OWNER, plan.conversation_id, message_id=plan.message_id, replica=f"r{index}")
                except (Busy, Gone):
                    return f"refused {index % width}"
                return f"won {index % width}"

            outcomes = self.family.run_in_processes(self.RACE_THREADS, race)
            batch = {int(number) for number in outcomes[0].split(",") if number}
            for number, plan in enumerate(handed):
                single = [outcome for outcome in outcomes[1:] if outcome.endswith(f" {number}")]
                winners = single.count(f"won {number}") + (number in batch)
                assert winners == 1, outcomes
                assert self.family.runs.list(OWNER, plan.conversation_id).total == 2
                assert self.family.turns.read_turn(OWNER, plan.conversation_id).state == "alive"

    def test_hand_off_many_refuses_an_invalid_or_repeated_item_and_writes_nothing(self, turns: Any) -> None:
        first, second = self.begin(turns), self.begin(turns)
        with pytest.raises(Validation):
            turns.hand_off_many([self.hand_off_item(first), self.hand_off_item(second, in_flight="nap")])
        with pytest.raises(Validation):
            turns.hand_off_many([self.hand_off_item(first), self.hand_off_item(second, epoch=0)])
        with pytest.raises(Validation):
            turns.hand_off_many([self.hand_off_item(first), self.hand_off_item(first)])
        for plan in (first, second):
            assert turns.read_turn(OWNER, plan.conversation_id).state == "alive"
            assert self.event_types(plan.conversation_id) == ["status_running"]

    @pytest.mark.django_db(transaction=True)
    def test_a_batch_hand_off_racing_resumes_of_its_turns_admits_one_producer_for_each(self) -> None:
        """A draining process hands off several turns in one call while resumers race for each of them (they read
        dead): each turn gets exactly one new producer, claimed before the batch (whose release of it is then
        fenced) or after it (claiming the handed-off turn), and the old epoch writes nothing more."""
        tally: Counter[str] = Counter()
        width = 3
        for _ in range(self.RACE_ROUNDS):
            dead = [self.dead_turn(self.family.turns) for _ in range(width)]

            def race(index: int) -> str:
                if index == 0:
                    released = self.family.turns.hand_off_many([self.hand_off_item(plan) for plan in dead])
                    return ",".join(str(sorted(str(plan.conversation_id) for plan in dead).index(str(pk)))
                                    for pk in sorted(str(key) for key in released))
                plan = dead[index % width]
                try:
                    self.family.turns.resume(OWNER, plan.conversation_id, replica=f"r{index}")
                except (Busy, Gone):
                    return f"refused {index % width}"
                return f"won {index % width}"

            outcomes = self.family.run_in_processes(self.RACE_THREADS, race)
            tally.update(["released"] * len([part for part in outcomes[0].split(",") if part]))
            for number, plan in enumerate(dead):
                racers = [outcome for outcome in outcomes[1:] if outcome.endswith(f" {number}")]
                assert sorted(racers) == [f"refused {number}"] * (len(racers) - 1) + [f"won {number}"], outcomes
                assert self.family.runs.list(OWNER, plan.conversation_id).total == 2
                view = self.family.turns.read_turn(OWNER, plan.conversation_id)
                assert view.state == "alive" and not self.seal(self.family.turns, plan)
                handed = "handed_off" in self.event_types(plan.conversation_id)
                position = sorted(str(p.conversation_id) for p in dead).index(str(plan.conversation_id))
                assert handed == (str(position) in outcomes[0].split(",")), outcomes
        assert tally["released"] <= self.RACE_ROUNDS * width
