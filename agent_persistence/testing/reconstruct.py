"""The contract of reconstruct-for-reload (:func:`agent_persistence.stores.reconstruct.reconstruct`) on a family.

Subclass :class:`ReconstructContract` and override ``make_stores()`` to run it
against another family: the call reads through the family's stores only, and
the suite arranges everything through them too.
"""

from __future__ import annotations

from typing import Any

import pytest

from ..exceptions import NotFound
from ..ids import uuid7
from ..stores.reconstruct import reconstruct
from .actors import ALICE, BOB, MALLORY
from .family import FamilyContract, claim_at

OWNER, READER, STRANGER = ALICE, BOB, MALLORY


class ReconstructContract(FamilyContract):
    """Everything a reload repaints, read in one call."""

    def rebuild(self, scope: Any = OWNER, conversation: Any = None, **options: Any) -> Any:
        return reconstruct(scope, (conversation or self.conversation).pk, stores=self.family, **options)

    @pytest.fixture(autouse=True)
    def arranged(self, stores: Any) -> None:
        """A conversation of two turns; the second has a subagent (with its own child) waiting on an approval."""
        family, scope = stores, OWNER
        self.conversation = conversation = family.conversations.create(scope, shared=True)
        append = family.conversations.append_message
        self.first_user = append(scope, conversation.pk, role="user", content="hello")
        self.first_answer = append(scope, conversation.pk, role="assistant", content="hi")
        family.runs.create_or_resume(scope, conversation.pk, id=uuid7(), message_id=self.first_answer.id)
        self.second_user = append(scope, conversation.pk, role="user", content="research django")
        self.turn_id = uuid7()
        self.parent = family.runs.create_or_resume(scope, conversation.pk, id=uuid7(), message_id=self.turn_id)
        self.child = family.runs.create_or_resume(scope, conversation.pk, id=uuid7(), message_id=self.turn_id,
                                                  parent_id=self.parent.pk, name="researcher")
        self.grandchild = family.runs.create_or_resume(scope, conversation.pk, id=uuid7(), message_id=self.turn_id,
                                                       parent_id=self.child.pk, name="fetcher")
        self.child_says = append(scope, conversation.pk, role="assistant", content="reading the docs", run_id=self.child.pk)
        self.child_transcript = [
            {"role": "user", "content": "research django"},
            {"role": "assistant", "content": "reading the docs",
             "tool_calls": [{"id": "call-1", "name": "fetch", "arguments": {}}]},
        ]
        family.runs.set_status(scope, self.child.pk, "interrupted", transcript=self.child_transcript)
        self.answer = append(scope, conversation.pk, id=self.turn_id, role="assistant", content="it is a framework",
                             run_id=self.parent.pk)
        self.pending = family.interrupts.create(scope, conversation.pk, id=uuid7(), run_id=self.child.pk,
                                                kind="tool_approval", payload={"tool_call_id": "call-1", "name": "fetch", "arguments": {}})
        family.activities.save(scope, conversation.pk, [
            {"activity_type": "web_search", "content": {"found": 3}, "message_id": self.turn_id},
        ])

    def test_the_newest_page_of_the_transcript_oldest_first(self) -> None:
        rebuilt = self.rebuild()
        assert rebuilt.conversation.pk == self.conversation.pk
        assert [message.id for message in rebuilt.messages.items] == [
            self.first_user.id, self.first_answer.id, self.second_user.id, self.child_says.id, self.answer.id,
        ]
        assert (rebuilt.messages.total, rebuilt.messages.has_more) == (5, False)

    def test_a_short_page_and_the_page_before_a_cursor(self) -> None:
        newest = self.rebuild(limit=2)
        assert [message.id for message in newest.messages.items] == [self.child_says.id, self.answer.id]
        assert newest.messages.has_more is True
        older = self.rebuild(limit=2, before=newest.messages.items[0].id)
        assert [message.id for message in older.messages.items] == [self.first_answer.id, self.second_user.id]
        assert older.messages.has_more is True

    def test_activity_rows_come_beside_the_messages(self) -> None:
        (row,) = self.rebuild().activities
        assert (row.activity_type, row.content, row.message_id) == ("web_search", {"found": 3}, self.turn_id)

    def test_one_card_per_child_run_with_its_transcript_and_nested_cards(self) -> None:
        (card,) = self.rebuild().subagents
        assert (card.run.pk, card.run.name, card.run.parent_id, card.run.message_id) == (
            self.child.pk, "researcher", self.parent.pk, self.turn_id
        )
        assert card.messages == self.child_transcript
        assert card.run.status == "interrupted"
        (nested,) = card.children
        assert (nested.run.pk, nested.run.name, nested.messages, nested.children) == (self.grandchild.pk, "fetcher", [], [])

    def test_cards_are_those_of_the_turns_on_the_page(self) -> None:
        assert self.rebuild(limit=2, before=self.second_user.id).subagents == []

    def test_pending_interrupts_only(self) -> None:
        other = self.family.interrupts.create(OWNER, self.conversation.pk, id=uuid7(), run_id=self.parent.pk, kind="generic")
        rebuilt = self.rebuild()
        assert [interrupt.pk for interrupt in rebuilt.interrupts] == [self.pending.pk, other.pk]
        self.family.interrupts.commit_batch(OWNER, self.conversation.pk, [
            {"id": str(self.pending.pk), "response": {"approved": True}}, {"id": str(other.pk), "response": "ok"},
        ])
        assert self.rebuild().interrupts == []

    def test_the_live_turn_to_tail_only_while_one_runs(self) -> None:
        assert self.rebuild().live_turn is None
        claim_at(self.family, self.conversation, 1, message_id=self.turn_id)
        live = self.rebuild().live_turn
        assert live is not None and (live.state, live.message_id, live.epoch) == ("alive", self.turn_id, 1)

    def test_a_reader_of_the_shared_conversation_may_reload_it_and_nobody_else(self) -> None:
        assert len(self.rebuild(READER).messages.items) == 5
        self.family.conversations.share(OWNER, self.conversation.pk, False)
        for scope in (READER, STRANGER):
            with pytest.raises(NotFound):
                self.rebuild(scope)
        with pytest.raises(NotFound):
            reconstruct(OWNER, uuid7(), stores=self.family)
