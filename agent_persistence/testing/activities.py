"""The contract of an activity store: every rule of :class:`~agent_persistence.stores.activities.ActivityStore`.

Subclass :class:`ActivityStoreContract` and override ``make_stores()`` (the
family) or ``make_store()`` to run it against another backend. Conversations
and supervision claims are set up through the family's other stores; the
suite asserts through the store API only, and its races run in real threads
on committed data.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from asgiref.sync import async_to_sync

from ..exceptions import ConversationNotOwned, Fenced, NotFound, StorageLimit, Validation
from ..ids import uuid7
from .actors import ALICE, BOB, MALLORY
from .concurrency import run_in_threads
from .family import FamilyContract

OWNER, READER, STRANGER = ALICE, BOB, MALLORY  # the owner, another user of her tenant, another tenant


def card(activity_type: str = "web_search", **fields: Any) -> dict[str, Any]:
    """An activity as a caller gives it (a search progress card unless told otherwise)."""
    return {"activity_type": activity_type, "content": {"query": "django", "found": 0}, **fields}


def shown(rows: list[Any]) -> list[tuple[uuid.UUID, str, Any, Any]]:
    """What a reload paints of each row, in list order."""
    return [(row.activity_id, row.activity_type, row.content, row.metadata) for row in rows]


class ActivityStoreContract(FamilyContract):
    """The behaviour every activity store must have, on every database it supports."""

    RACE_ROUNDS = 4
    RACE_THREADS = 8

    def make_store(self) -> Any:
        return self.family.activities

    @pytest.fixture
    def store(self, stores: Any) -> Any:
        return self.make_store()

    # -- save: a full overwrite -------------------------------------------------------------

    def test_save_stores_exactly_the_list_in_its_order(self, store: Any) -> None:
        conversation = self.new_conversation()
        first, second = uuid7(), uuid7()
        turn = uuid7()
        saved = store.save(OWNER, conversation.pk, [
            card(id=str(second), content={"query": "b"}, metadata={"source": "ag-ui"}, message_id=str(turn)),
            card("checklist", id=first, content={"steps": ["a", "b"]}),
        ])
        assert shown(saved) == shown(store.list(OWNER, conversation.pk)) == [
            (second, "web_search", {"query": "b"}, {"source": "ag-ui"}),
            (first, "checklist", {"steps": ["a", "b"]}, {}),
        ]
        rows = store.list(OWNER, conversation.pk)
        assert [row.position for row in rows] == [0, 1]
        assert (rows[0].message_id, rows[1].message_id, rows[0].revision) == (turn, None, 1)

    def test_an_activity_without_id_gets_one(self, store: Any) -> None:
        conversation = self.new_conversation()
        (saved,) = store.save(OWNER, conversation.pk, [card()])
        assert isinstance(saved.activity_id, uuid.UUID)
        assert store.list(OWNER, conversation.pk)[0].activity_id == saved.activity_id

    def test_save_replaces_the_whole_list(self, store: Any) -> None:
        conversation = self.new_conversation()
        kept, dropped = uuid7(), uuid7()
        store.save(OWNER, conversation.pk, [card(id=dropped), card(id=kept, content={"found": 1})])
        before = {row.activity_id: row for row in store.list(OWNER, conversation.pk)}
        new = uuid7()
        store.save(OWNER, conversation.pk, [card(id=new), card(id=kept, content={"found": 2})])
        rows = store.list(OWNER, conversation.pk)
        assert [(row.activity_id, row.position, row.content) for row in rows] == [(new, 0, {"query": "django", "found": 0}),
                                                                                   (kept, 1, {"found": 2})]
        assert rows[1].revision == before[kept].revision + 1 and rows[1].created_at == before[kept].created_at
        assert rows[0].revision == 1

    def test_saving_an_empty_list_clears_it(self, store: Any) -> None:
        conversation = self.new_conversation()
        store.save(OWNER, conversation.pk, [card(), card()])
        assert store.save(OWNER, conversation.pk, []) == []
        assert store.list(OWNER, conversation.pk) == []

    def test_values_come_back_as_json_round_tripping_gives_them(self, store: Any) -> None:
        conversation = self.new_conversation()
        store.save(OWNER, conversation.pk, [card(content={"n": (1, 2), "text": '{"looks": "like json"}', "none": None})])
        assert store.list(OWNER, conversation.pk)[0].content == {"n": [1, 2], "text": '{"looks": "like json"}', "none": None}

    def test_activities_are_not_part_of_the_transcript(self, store: Any) -> None:
        conversation = self.new_conversation()
        self.family.conversations.append_message(OWNER, conversation.pk, role="user", content="search django")
        store.save(OWNER, conversation.pk, [card()])
        messages = self.family.conversations.list_messages(OWNER, conversation.pk).items
        assert [message.role for message in messages] == ["user"]

    def test_list_keeps_one_turns_activities(self, store: Any) -> None:
        conversation = self.new_conversation()
        turn, other = uuid7(), uuid7()
        mine, theirs = uuid7(), uuid7()
        store.save(OWNER, conversation.pk, [card(id=mine, message_id=turn), card(id=theirs, message_id=other), card()])
        assert [row.activity_id for row in store.list(OWNER, conversation.pk, message_id=str(turn))] == [mine]

    # -- save: bad input changes nothing ------------------------------------------------------

    @pytest.mark.parametrize(
        "activities, field",
        [
            ("not a list", "activities"),
            ([["not", "an", "object"]], "activities[0]"),
            ([{"content": {}}], "activities[0].activity_type"),
            ([card(activity_type="   ")], "activities[0].activity_type"),
            ([card(activity_type=7)], "activities[0].activity_type"),
            ([card(content=["not", "an", "object"])], "activities[0].content"),
            ([card(metadata="text")], "activities[0].metadata"),
            ([card(id="not-a-uuid")], "activities[0].id"),
            ([card(message_id=12)], "activities[0].message_id"),
            ([card(colour="red")], "activities[0].colour"),
            ([card(content={"text": "nul \x00 inside"})], "activities[0].content"),
            ([card(content={"text": "lone \ud800 surrogate"})], "activities[0].content"),
            ([card(content={"big": 2**64})], "activities[0].content"),
            ([card(activity_type="x" * 256)], "activities[0].activity_type"),
        ],
    )
    def test_an_invalid_list_is_validation_and_changes_nothing(self, store: Any, activities: Any, field: str) -> None:
        conversation = self.new_conversation()
        before = shown(store.save(OWNER, conversation.pk, [card()]))
        with pytest.raises(Validation) as caught:
            store.save(OWNER, conversation.pk, activities)
        assert caught.value.details.get("field", "").startswith(field)
        assert shown(store.list(OWNER, conversation.pk)) == before

    def test_an_id_twice_in_one_list_is_refused(self, store: Any) -> None:
        conversation = self.new_conversation()
        twice = uuid7()
        with pytest.raises(Validation) as caught:
            store.save(OWNER, conversation.pk, [card(id=twice), card(id=str(twice))])
        assert caught.value.code == "duplicate_activity_id"
        assert store.list(OWNER, conversation.pk) == []

    def test_deeply_nested_content_is_refused(self, store: Any) -> None:
        conversation = self.new_conversation()
        nested: Any = {}
        for _ in range(200):
            nested = {"a": nested}
        with pytest.raises(Validation):
            store.save(OWNER, conversation.pk, [card(content=nested)])
        assert store.list(OWNER, conversation.pk) == []

    def test_content_over_the_message_limit_is_storage_limit(self, store: Any, settings: Any) -> None:
        settings.AGENT_PERSISTENCE = {**settings.AGENT_PERSISTENCE, "MAX_MESSAGE_BYTES": 100}
        conversation = self.new_conversation()
        with pytest.raises(StorageLimit):
            store.save(OWNER, conversation.pk, [card(content={"text": "x" * 200})])
        assert store.list(OWNER, conversation.pk) == []

    def test_a_list_longer_than_max_page_size_is_refused(self, store: Any, settings: Any) -> None:
        settings.AGENT_PERSISTENCE = {**settings.AGENT_PERSISTENCE, "MAX_PAGE_SIZE": 3}
        conversation = self.new_conversation()
        with pytest.raises(Validation) as caught:
            store.save(OWNER, conversation.pk, [card() for _ in range(4)])
        assert caught.value.code == "too_many_activities"
        store.save(OWNER, conversation.pk, [card() for _ in range(3)])
        with pytest.raises(Validation):
            store.put(OWNER, conversation.pk, card())
        assert len(store.list(OWNER, conversation.pk)) == 3

    # -- access -------------------------------------------------------------------------------

    def test_reads_follow_the_conversation_read_rule(self, store: Any) -> None:
        shared, private = self.new_conversation(shared=True), self.new_conversation()
        store.save(OWNER, shared.pk, [card()])
        store.save(OWNER, private.pk, [card()])
        assert len(store.list(READER, shared.pk)) == 1
        for scope, conversation_id in ((READER, private.pk), (STRANGER, shared.pk), (OWNER, uuid7()), (OWNER, "x")):
            with pytest.raises(NotFound):
                store.list(scope, conversation_id)

    def test_writes_are_the_owners(self, store: Any) -> None:
        shared = self.new_conversation(shared=True)
        before = shown(store.save(OWNER, shared.pk, [card()]))
        with pytest.raises(ConversationNotOwned):
            store.save(READER, shared.pk, [])
        with pytest.raises(ConversationNotOwned):
            store.put(READER, shared.pk, card())
        for write in (lambda: store.save(STRANGER, shared.pk, []), lambda: store.put(STRANGER, shared.pk, card()),
                      lambda: store.save(OWNER, uuid7(), [card()])):
            with pytest.raises(NotFound):
                write()
        assert shown(store.list(OWNER, shared.pk)) == before

    def test_deleting_the_conversation_deletes_its_activities(self, store: Any) -> None:
        conversation = self.new_conversation()
        store.save(OWNER, conversation.pk, [card()])
        self.family.conversations.delete(OWNER, conversation.pk)
        with pytest.raises(NotFound):
            store.list(OWNER, conversation.pk)
        again = self.family.conversations.create(OWNER, id=conversation.pk)
        assert store.list(OWNER, again.pk) == []

    # -- put: one row -------------------------------------------------------------------------

    def test_put_appends_a_new_row_and_replaces_a_stored_one_in_place(self, store: Any) -> None:
        conversation = self.new_conversation()
        first, second = uuid7(), uuid7()
        store.put(OWNER, conversation.pk, card(id=first, content={"found": 1}))
        store.put(OWNER, conversation.pk, card(id=second))
        replaced = store.put(OWNER, conversation.pk, card("search_done", id=first, content={"found": 3}))
        rows = store.list(OWNER, conversation.pk)
        assert [(row.activity_id, row.position, row.activity_type, row.content) for row in rows] == [
            (first, 0, "search_done", {"found": 3}), (second, 1, "web_search", {"query": "django", "found": 0}),
        ]
        assert replaced.revision == rows[0].revision == 2 and rows[1].revision == 1

    def test_a_producer_put_is_fenced_by_its_epoch(self, store: Any) -> None:
        conversation = self.new_conversation()
        self.claim_epoch(conversation, 1)
        store.put(OWNER, conversation.pk, card(content={"found": 1}), epoch=1)
        self.claim_epoch(conversation, 2)
        with pytest.raises(Fenced):
            store.put(OWNER, conversation.pk, card(content={"found": 2}), epoch=1)
        assert [row.content for row in store.list(OWNER, conversation.pk)] == [{"found": 1}]
        store.put(OWNER, conversation.pk, card(content={"found": 3}), epoch=2)
        assert len(store.list(OWNER, conversation.pk)) == 2

    def test_a_put_without_a_turn_is_fenced_when_an_epoch_is_given(self, store: Any) -> None:
        conversation = self.new_conversation()
        with pytest.raises(Fenced):
            store.put(OWNER, conversation.pk, card(), epoch=1)
        assert store.list(OWNER, conversation.pk) == []

    # -- races --------------------------------------------------------------------------------

    @pytest.mark.django_db(transaction=True)
    def test_concurrent_saves_leave_exactly_one_of_the_saved_lists(self, store: Any) -> None:
        conversation = self.new_conversation()
        for _ in range(self.RACE_ROUNDS):
            # Lists of different lengths with ids of their own: a mix of two would show.
            lists = [[card(id=uuid7(), content={"writer": index, "row": row}) for row in range(index % 4 + 1)]
                     for index in range(self.RACE_THREADS)]

            def save(index: int) -> None:
                store.save(OWNER, conversation.pk, lists[index])

            outcomes = run_in_threads(self.RACE_THREADS, save)
            assert outcomes == [None] * self.RACE_THREADS, outcomes
            stored = [(row.activity_id, row.content) for row in store.list(OWNER, conversation.pk)]
            candidates = [[(row["id"], row["content"]) for row in saved] for saved in lists]
            assert stored in candidates
            assert [row.position for row in store.list(OWNER, conversation.pk)] == list(range(len(stored)))

    @pytest.mark.django_db(transaction=True)
    def test_concurrent_puts_of_new_rows_keep_every_row_at_a_dense_position(self, store: Any) -> None:
        conversation = self.new_conversation()

        def put(index: int) -> uuid.UUID:
            return store.put(OWNER, conversation.pk, card(content={"writer": index})).activity_id

        outcomes = run_in_threads(self.RACE_THREADS, put)
        assert not [o for o in outcomes if isinstance(o, BaseException)], outcomes
        rows = store.list(OWNER, conversation.pk)
        assert sorted(row.activity_id for row in rows) == sorted(outcomes)
        assert [row.position for row in rows] == list(range(self.RACE_THREADS))

    # -- async twins --------------------------------------------------------------------------

    def test_async_twins_run_the_sync_methods(self, store: Any) -> None:
        conversation = self.new_conversation()
        first = uuid7()
        async_to_sync(store.asave)(OWNER, conversation.pk, [card(id=first)])
        async_to_sync(store.aput)(OWNER, conversation.pk, card(id=first, content={"found": 9}))
        rows = async_to_sync(store.alist)(OWNER, conversation.pk)
        assert [(row.activity_id, row.content, row.revision) for row in rows] == [(first, {"found": 9}, 2)]
