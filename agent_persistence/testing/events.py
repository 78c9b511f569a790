"""The contract of an event store, as a pytest class a custom backend can subclass.

::

    from agent_persistence.testing.events import EventStoreContract

    class TestMyEventStore(EventStoreContract):
        def make_store(self):
            return MyEventStore()

Conversations are created through the family's conversation store
(override ``make_stores()`` to run the suite on another family); the suite
asserts through the store API only. The race tests use real threads and forked
processes (threads for a family kept in one process's memory), so an ORM
database must take concurrent transactions (PostgreSQL, or SQLite on a file in
WAL mode with IMMEDIATE transactions).
"""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.conf import settings as django_settings
from django.utils import timezone

from ..conf import app_settings
from ..exceptions import ConversationNotOwned, NotFound, StorageLimit, Validation
from ..models import Conversation, Event
from ..scope import Scope
from ..stores.events import EventPage, EventSummary
from .concurrency import run_in_threads
from .family import FamilyContract

#: Later than anything a test writes: ``prune(before=FAR_FUTURE)`` counts every stored event.
FAR_FUTURE = datetime(9000, 1, 1, tzinfo=UTC)

OWNER = Scope(tenant="acme", user="alice")
#: Same tenant, not the owner: reads shared conversations only, never writes.
READER = Scope(tenant="acme", user="bob")
#: Another tenant, with the owner's user id: sees nothing of ``acme``.
STRANGER = Scope(tenant="other", user="alice")


def tick(**data: Any) -> dict[str, Any]:
    return {"type": "tick", "data": data}


def seqs(events: list[Event]) -> list[int]:
    return [event.seq for event in events]


def _fields(event: Event) -> tuple[Any, ...]:
    return (event.conversation_id, event.seq, event.type, event.data, event.run_id)


def assert_no_errors(results: list[Any]) -> None:
    errors = [result for result in results if isinstance(result, BaseException)]
    assert not errors, f"{len(errors)} of {len(results)} workers failed; the first: {errors[0]}"


def moment_passes() -> datetime:
    """A timestamp strictly between what was written before the call and what is written after it."""
    time.sleep(0.005)
    moment = timezone.now()
    time.sleep(0.005)
    return moment


class EventStoreContract(FamilyContract):
    """Every rule of the event store; subclass and override :meth:`make_stores` or :meth:`make_store`."""

    def make_store(self) -> Any:
        return self.family.events

    @pytest.fixture
    def store(self, stores: Any) -> Any:
        return self.make_store()

    def make_conversation(self, scope: Scope = OWNER, *, shared: bool = False) -> Conversation:
        return self.new_conversation(scope, shared=shared)

    def all_seqs(self, store: Any, conversation: Conversation) -> list[int]:
        return seqs(store.list(OWNER, conversation.pk, limit=app_settings.MAX_PAGE_SIZE).events)

    def stored_counter(self, conversation: Conversation) -> int:
        """The conversation's event counter (its last seq), as its owner's summary reports it."""
        owner = Scope(tenant=conversation.tenant, user=conversation.owner)
        return self.family.events.summary(owner, [conversation.pk])[conversation.pk].last_seq

    def prune_everything(self, store: Any) -> int:
        """How many events are stored, in every conversation and tenant (deleting them: call it last)."""
        return store.prune(before=FAR_FUTURE, limit=2**31)

    # -- append ------------------------------------------------------------------------------

    @pytest.mark.django_db
    def test_append_numbers_events_from_one_in_order(self, store: Any) -> None:
        conversation = self.make_conversation()
        run_id = uuid.uuid4()
        batch = [tick(n=1), {"type": "note", "data": {"text": "hi"}}, {"type": "bare"}]
        events = store.append(OWNER, conversation.pk, batch, run_id=run_id)
        assert seqs(events) == [1, 2, 3]
        assert [event.type for event in events] == ["tick", "note", "bare"]
        assert [event.data for event in events] == [{"n": 1}, {"text": "hi"}, {}]
        assert all(event.run_id == run_id and event.conversation_id == conversation.pk for event in events)
        stored = store.list(OWNER, conversation.pk).events
        assert [_fields(event) for event in stored] == [_fields(event) for event in events]

    @pytest.mark.django_db
    def test_append_continues_numbering_across_calls_and_store_instances(self, store: Any) -> None:
        conversation = self.make_conversation()
        assert seqs(store.append(OWNER, conversation.pk, [tick(), tick()])) == [1, 2]
        assert seqs(store.append(OWNER, str(conversation.pk), [tick()])) == [3]
        restarted = self.make_store()
        assert seqs(restarted.append(OWNER, conversation.pk, [tick(), tick()])) == [4, 5]
        assert self.all_seqs(store, conversation) == [1, 2, 3, 4, 5]

    @pytest.mark.django_db
    def test_each_conversation_counts_on_its_own(self, store: Any) -> None:
        first, second = self.make_conversation(), self.make_conversation()
        store.append(OWNER, first.pk, [tick(), tick()])
        assert seqs(store.append(OWNER, second.pk, [tick()])) == [1]
        assert seqs(store.append(OWNER, first.pk, [tick()])) == [3]

    @pytest.mark.django_db
    def test_event_run_id_overrides_the_batch_run_id(self, store: Any) -> None:
        conversation = self.make_conversation()
        batch_run, own_run = uuid.uuid4(), uuid.uuid4()
        events = store.append(
            OWNER,
            conversation.pk,
            [tick(), {"type": "tick", "run_id": str(own_run)}, {"type": "tick", "run_id": None}],
            run_id=str(batch_run),
        )
        assert [event.run_id for event in events] == [batch_run, own_run, None]
        assert store.append(OWNER, conversation.pk, [tick()])[0].run_id is None

    @pytest.mark.django_db
    def test_data_round_trips_as_json(self, store: Any) -> None:
        conversation = self.make_conversation()
        data = {"when": datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC), "pair": (1, 2), "text": '{"a": 1}', "none": None}
        [event] = store.append(OWNER, conversation.pk, [{"type": "t", "data": data}])
        expected = {"when": "2030-01-02T03:04:05Z", "pair": [1, 2], "text": '{"a": 1}', "none": None}
        assert event.data == expected
        assert store.list(OWNER, conversation.pk).events[0].data == expected

    @pytest.mark.django_db
    def test_empty_batch_returns_nothing_and_writes_nothing(self, store: Any) -> None:
        conversation = self.make_conversation()
        assert store.append(OWNER, conversation.pk, []) == []
        assert self.stored_counter(conversation) == 0
        assert seqs(store.append(OWNER, conversation.pk, [tick()])) == [1]

    @pytest.mark.django_db
    def test_empty_batch_still_checks_the_conversation(self, store: Any) -> None:
        with pytest.raises(NotFound):
            store.append(OWNER, uuid.uuid4(), [])
        with pytest.raises(NotFound):
            store.append(STRANGER, self.make_conversation().pk, [])

    @pytest.mark.django_db
    @pytest.mark.parametrize("conversation_id", [uuid.uuid4(), "not-a-uuid", None, 42])
    def test_append_to_unknown_conversation_is_not_found(self, store: Any, conversation_id: Any) -> None:
        with pytest.raises(NotFound) as raised:
            store.append(OWNER, conversation_id, [tick()])
        assert raised.value.code == "not_found"
        assert self.prune_everything(store) == 0

    @pytest.mark.django_db
    def test_another_tenants_conversation_is_not_found(self, store: Any) -> None:
        conversation = self.make_conversation(OWNER, shared=True)
        store.append(OWNER, conversation.pk, [tick()])
        with pytest.raises(NotFound):
            store.append(STRANGER, conversation.pk, [tick()])
        with pytest.raises(NotFound):
            store.list(STRANGER, conversation.pk)
        assert store.summary(STRANGER, [conversation.pk]) == {}
        assert self.stored_counter(conversation) == 1

    @pytest.mark.django_db
    def test_only_the_owner_appends(self, store: Any) -> None:
        private, shared = self.make_conversation(), self.make_conversation(shared=True)
        with pytest.raises(NotFound):
            store.append(READER, private.pk, [tick()])
        with pytest.raises(ConversationNotOwned) as raised:
            store.append(READER, shared.pk, [tick()])
        assert raised.value.code == "conversation_not_owned"
        assert self.prune_everything(store) == 0

    @pytest.mark.django_db
    def test_a_shared_conversation_is_readable_in_its_tenant(self, store: Any) -> None:
        private, shared = self.make_conversation(), self.make_conversation(shared=True)
        store.append(OWNER, private.pk, [tick()])
        store.append(OWNER, shared.pk, [tick(), tick()])
        assert seqs(store.list(READER, shared.pk).events) == [1, 2]
        with pytest.raises(NotFound):
            store.list(READER, private.pk)
        assert set(store.summary(READER, [private.pk, shared.pk])) == {shared.pk}

    @pytest.mark.django_db
    @pytest.mark.parametrize(
        "bad_event",
        [
            "tick",
            None,
            {},
            {"data": {}},
            {"type": ""},
            {"type": 7},
            {"type": "x" * 101},
            {"type": "nul\x00"},
            {"type": "t", "data": []},
            {"type": "t", "data": "text"},
            {"type": "t", "data": {"nul": "a\x00b"}},
            {"type": "t", "data": {"nan": float("nan")}},
            {"type": "t", "data": {"set": {1, 2}}},
            {"type": "t", "run_id": "not-a-uuid"},
            {"type": "t", "extra": 1},
            {"type": "status_idle", "data": {"stop_reason": 3}},
            {"type": "status_idle", "data": {"stop_reason": "r" * 65}},
        ],
    )
    def test_a_bad_event_is_validation_and_the_batch_writes_nothing(self, store: Any, bad_event: Any) -> None:
        conversation = self.make_conversation()
        with pytest.raises(Validation) as raised:
            store.append(OWNER, conversation.pk, [tick(n=1), bad_event, tick(n=2)])
        assert raised.value.code in ("invalid", "invalid_id")
        assert self.all_seqs(store, conversation) == []
        assert self.stored_counter(conversation) == 0

    @pytest.mark.django_db
    @pytest.mark.parametrize("events", [None, "tick", {"type": "tick"}, 3])
    def test_events_must_be_a_list(self, store: Any, events: Any) -> None:
        with pytest.raises(Validation):
            store.append(OWNER, self.make_conversation().pk, events)

    @pytest.mark.django_db
    def test_a_batch_holds_at_most_a_page_of_events(self, store: Any) -> None:
        conversation = self.make_conversation()
        most = app_settings.MAX_PAGE_SIZE
        with pytest.raises(Validation):
            store.append(OWNER, conversation.pk, [{"type": "t"}] * (most + 1))
        assert self.stored_counter(conversation) == 0
        assert len(store.append(OWNER, conversation.pk, [{"type": "t"}] * most)) == most

    @pytest.mark.django_db
    def test_a_bad_batch_run_id_is_validation(self, store: Any) -> None:
        with pytest.raises(Validation):
            store.append(OWNER, self.make_conversation().pk, [tick()], run_id="nope")

    @pytest.mark.django_db
    def test_type_of_exactly_100_characters_is_accepted(self, store: Any) -> None:
        [event] = store.append(OWNER, self.make_conversation().pk, [{"type": "x" * 100}])
        assert event.type == "x" * 100

    @pytest.mark.django_db
    def test_data_over_the_limit_is_storage_limit_and_the_batch_writes_nothing(self, store: Any) -> None:
        conversation = self.make_conversation()
        limit = app_settings.MAX_EVENT_BYTES
        store.append(OWNER, conversation.pk, [{"type": "big", "data": {"blob": "x" * (limit - 100)}}])
        with pytest.raises(StorageLimit) as raised:
            store.append(OWNER, conversation.pk, [tick(), {"type": "big", "data": {"blob": "x" * limit}}])
        assert raised.value.code == "too_large"
        assert self.all_seqs(store, conversation) == [1]
        assert self.stored_counter(conversation) == 1

    @pytest.mark.django_db
    def test_the_limit_is_the_configured_one(self, store: Any, settings: Any) -> None:
        settings.AGENT_PERSISTENCE = {**getattr(django_settings, "AGENT_PERSISTENCE", {}), "MAX_EVENT_BYTES": 200}
        conversation = self.make_conversation()
        store.append(OWNER, conversation.pk, [{"type": "t", "data": {"blob": "x" * 150}}])
        with pytest.raises(StorageLimit):
            store.append(OWNER, conversation.pk, [{"type": "t", "data": {"blob": "x" * 250}}])

    @pytest.mark.django_db
    def test_scope_must_be_a_scope(self, store: Any) -> None:
        conversation = self.make_conversation()
        with pytest.raises(TypeError):
            store.append(("acme", "alice"), conversation.pk, [tick()])

    # -- stop reason -------------------------------------------------------------------------

    def stop_reason(self, store: Any, conversation: Conversation) -> str | None:
        return store.summary(OWNER, [conversation.pk])[conversation.pk].stop_reason

    @pytest.mark.django_db
    def test_stop_reason_is_the_newest_idle_events(self, store: Any) -> None:
        conversation = self.make_conversation()
        assert self.stop_reason(store, conversation) is None
        store.append(OWNER, conversation.pk, [{"type": "status_idle", "data": {"stop_reason": "end_turn"}}])
        assert self.stop_reason(store, conversation) == "end_turn"
        store.append(OWNER, conversation.pk, [tick(stop_reason="ignored"), {"type": "status_idle_not", "data": {}}])
        assert self.stop_reason(store, conversation) == "end_turn"
        store.append(OWNER, conversation.pk, [{"type": "status_idle", "data": {"stop_reason": "requires_action"}}])
        assert self.stop_reason(store, conversation) == "requires_action"

    @pytest.mark.django_db
    def test_a_later_running_event_clears_the_stop_reason(self, store: Any) -> None:
        conversation = self.make_conversation()
        store.append(OWNER, conversation.pk, [{"type": "status_idle", "data": {"stop_reason": "end_turn"}}])
        store.append(OWNER, conversation.pk, [{"type": "status_running"}])
        assert self.stop_reason(store, conversation) is None

    @pytest.mark.django_db
    def test_a_batch_applies_stop_reasons_in_order(self, store: Any) -> None:
        idle_then_running, running_then_idle = self.make_conversation(), self.make_conversation()
        idle = {"type": "status_idle", "data": {"stop_reason": "end_turn"}}
        running = {"type": "status_running", "data": {}}
        store.append(OWNER, idle_then_running.pk, [idle, running])
        store.append(OWNER, running_then_idle.pk, [running, idle, tick()])
        assert self.stop_reason(store, idle_then_running) is None
        assert self.stop_reason(store, running_then_idle) == "end_turn"

    @pytest.mark.django_db
    def test_an_idle_event_without_a_stop_reason_clears_it(self, store: Any) -> None:
        conversation = self.make_conversation()
        store.append(OWNER, conversation.pk, [{"type": "status_idle", "data": {"stop_reason": "end_turn"}}])
        store.append(OWNER, conversation.pk, [{"type": "status_idle"}])
        assert self.stop_reason(store, conversation) is None

    @pytest.mark.django_db
    def test_a_refused_batch_leaves_the_stop_reason(self, store: Any) -> None:
        conversation = self.make_conversation()
        store.append(OWNER, conversation.pk, [{"type": "status_idle", "data": {"stop_reason": "end_turn"}}])
        with pytest.raises(Validation):
            store.append(OWNER, conversation.pk, [{"type": "status_running"}, {"type": ""}])
        assert self.stop_reason(store, conversation) == "end_turn"

    # -- list --------------------------------------------------------------------------------

    @pytest.mark.django_db
    def test_list_pages_forward_with_after_and_last_seq(self, store: Any) -> None:
        conversation = self.make_conversation()
        store.append(OWNER, conversation.pk, [tick(n=n) for n in range(5)])
        pages = []
        after = 0
        while True:
            page = store.list(OWNER, conversation.pk, after=after, limit=2)
            assert isinstance(page, EventPage)
            pages.append((seqs(page.events), page.has_more, page.last_seq))
            after = page.last_seq
            if not page.has_more:
                break
        assert pages == [([1, 2], True, 2), ([3, 4], True, 4), ([5], False, 5)]
        assert store.list(OWNER, conversation.pk, after=5) == EventPage(events=[], has_more=False, last_seq=5)
        assert store.list(OWNER, conversation.pk, after=99) == EventPage(events=[], has_more=False, last_seq=99)

    @pytest.mark.django_db
    def test_a_full_last_page_has_no_more(self, store: Any) -> None:
        conversation = self.make_conversation()
        store.append(OWNER, conversation.pk, [tick(), tick()])
        page = store.list(OWNER, conversation.pk, limit=2)
        assert (seqs(page.events), page.has_more, page.last_seq) == ([1, 2], False, 2)

    @pytest.mark.django_db
    def test_list_pages_backward_newest_first(self, store: Any) -> None:
        conversation = self.make_conversation()
        store.append(OWNER, conversation.pk, [tick(n=n) for n in range(5)])
        first = store.list(OWNER, conversation.pk, order="desc", limit=2)
        assert (seqs(first.events), first.has_more, first.last_seq) == ([5, 4], True, 4)
        second = store.list(OWNER, conversation.pk, order="desc", before=first.last_seq, limit=2)
        assert (seqs(second.events), second.has_more, second.last_seq) == ([3, 2], True, 2)
        third = store.list(OWNER, conversation.pk, order="desc", before=second.last_seq, limit=2)
        assert (seqs(third.events), third.has_more, third.last_seq) == ([1], False, 1)
        empty = store.list(OWNER, conversation.pk, order="desc", before=1, after=0)
        assert (empty.events, empty.has_more, empty.last_seq) == ([], False, 0)

    @pytest.mark.django_db
    def test_after_and_before_are_exclusive(self, store: Any) -> None:
        conversation = self.make_conversation()
        store.append(OWNER, conversation.pk, [tick() for _ in range(6)])
        assert seqs(store.list(OWNER, conversation.pk, after=1, before=4).events) == [2, 3]
        assert seqs(store.list(OWNER, conversation.pk, after=2, before=3).events) == []
        assert seqs(store.list(OWNER, conversation.pk, before=3, order="desc").events) == [2, 1]
        assert seqs(store.list(OWNER, conversation.pk, after=4, before=100).events) == [5, 6]
        # Bounds past any database integer are answered, not a driver error.
        assert seqs(store.list(OWNER, conversation.pk, after=4, before=2**70).events) == [5, 6]
        assert store.list(OWNER, conversation.pk, after=2**70).events == []

    @pytest.mark.django_db
    def test_types_filter_the_listing_and_its_paging(self, store: Any) -> None:
        conversation = self.make_conversation()
        store.append(OWNER, conversation.pk, [{"type": t} for t in ["a", "b", "a", "c", "a"]])
        assert seqs(store.list(OWNER, conversation.pk, types=["a"]).events) == [1, 3, 5]
        assert seqs(store.list(OWNER, conversation.pk, types=("a", "c")).events) == [1, 3, 4, 5]
        assert seqs(store.list(OWNER, conversation.pk, types=["zzz"]).events) == []
        assert seqs(store.list(OWNER, conversation.pk, types=[]).events) == []
        page = store.list(OWNER, conversation.pk, types=["a"], limit=2)
        assert (seqs(page.events), page.has_more, page.last_seq) == ([1, 3], True, 3)
        page = store.list(OWNER, conversation.pk, types=["a"], after=3, limit=2)
        assert (seqs(page.events), page.has_more, page.last_seq) == ([5], False, 5)

    @pytest.mark.django_db
    def test_default_limit_is_the_configured_page_size(self, store: Any) -> None:
        conversation = self.make_conversation()
        size = app_settings.DEFAULT_PAGE_SIZE
        store.append(OWNER, conversation.pk, [tick() for _ in range(size + 1)])
        page = store.list(OWNER, conversation.pk)
        assert seqs(page.events) == list(range(1, size + 1))
        assert page.has_more

    @pytest.mark.django_db
    def test_limit_up_to_the_maximum_is_accepted(self, store: Any) -> None:
        conversation = self.make_conversation()
        store.append(OWNER, conversation.pk, [tick()])
        assert seqs(store.list(OWNER, conversation.pk, limit=app_settings.MAX_PAGE_SIZE).events) == [1]

    @pytest.mark.django_db
    @pytest.mark.parametrize(
        "arguments",
        [
            {"limit": 0},
            {"limit": -1},
            {"limit": "10"},
            {"limit": True},
            {"limit": 10**9},
            {"after": -1},
            {"after": "1"},
            {"after": None},
            {"after": True},
            {"before": -1},
            {"before": 2.5},
            {"order": "up"},
            {"types": "a"},
            {"types": [1]},
            {"types": ["nul\x00"]},
        ],
    )
    def test_bad_list_arguments_are_validation(self, store: Any, arguments: dict[str, Any]) -> None:
        conversation = self.make_conversation()
        with pytest.raises(Validation):
            store.list(OWNER, conversation.pk, **arguments)

    @pytest.mark.django_db
    def test_limit_over_the_maximum_is_validation(self, store: Any) -> None:
        with pytest.raises(Validation):
            store.list(OWNER, self.make_conversation().pk, limit=app_settings.MAX_PAGE_SIZE + 1)

    @pytest.mark.django_db
    @pytest.mark.parametrize("conversation_id", [uuid.uuid4(), "nope"])
    def test_list_of_unknown_conversation_is_not_found(self, store: Any, conversation_id: Any) -> None:
        with pytest.raises(NotFound):
            store.list(OWNER, conversation_id)

    # -- summary -----------------------------------------------------------------------------

    @pytest.mark.django_db
    def test_summary_reports_last_seq_and_stop_reason_of_readable_conversations(self, store: Any) -> None:
        busy, idle, untouched = self.make_conversation(), self.make_conversation(), self.make_conversation()
        others = self.make_conversation(STRANGER)
        store.append(OWNER, busy.pk, [tick(), {"type": "status_running"}])
        store.append(OWNER, idle.pk, [{"type": "status_idle", "data": {"stop_reason": "end_turn"}}])
        result = store.summary(OWNER, [busy.pk, str(idle.pk), untouched.pk, others.pk, uuid.uuid4(), "junk"])
        assert result == {
            busy.pk: EventSummary(last_seq=2, stop_reason=None),
            idle.pk: EventSummary(last_seq=1, stop_reason="end_turn"),
            untouched.pk: EventSummary(last_seq=0, stop_reason=None),
        }
        assert store.summary(OWNER, []) == {}

    @pytest.mark.django_db
    @pytest.mark.parametrize("conversation_ids", [None, "abc", 3])
    def test_summary_takes_a_list(self, store: Any, conversation_ids: Any) -> None:
        with pytest.raises(Validation):
            store.summary(OWNER, conversation_ids)

    @pytest.mark.django_db
    def test_summary_of_too_many_conversations_is_validation(self, store: Any) -> None:
        with pytest.raises(Validation):
            store.summary(OWNER, [uuid.uuid4() for _ in range(app_settings.MAX_PAGE_SIZE + 1)])

    # -- prune and deletion ------------------------------------------------------------------

    @pytest.mark.django_db
    def test_prune_deletes_events_created_before_the_cutoff(self, store: Any) -> None:
        conversation = self.make_conversation()
        store.append(OWNER, conversation.pk, [tick(), tick(), tick()])
        cutoff = moment_passes()
        store.append(OWNER, conversation.pk, [tick(), tick()])
        assert store.prune(before=cutoff) == 3
        assert self.all_seqs(store, conversation) == [4, 5]
        assert store.prune(before=cutoff) == 0

    @pytest.mark.django_db
    def test_seq_keeps_counting_after_a_prune(self, store: Any) -> None:
        conversation = self.make_conversation()
        store.append(OWNER, conversation.pk, [tick(), tick()])
        assert store.prune(before=moment_passes()) == 2
        assert self.all_seqs(store, conversation) == []
        assert seqs(store.append(OWNER, conversation.pk, [tick()])) == [3]
        assert store.summary(OWNER, [conversation.pk])[conversation.pk].last_seq == 3

    @pytest.mark.django_db
    def test_prune_takes_the_oldest_first_across_conversations_and_tenants(self, store: Any) -> None:
        ours, theirs = self.make_conversation(OWNER), self.make_conversation(STRANGER)
        for _ in range(3):
            store.append(OWNER, ours.pk, [tick()])
            moment_passes()
            store.append(STRANGER, theirs.pk, [tick()])
            moment_passes()
        cutoff = moment_passes()
        assert store.prune(before=cutoff, limit=3) == 3
        assert self.all_seqs(store, ours) == [3]
        assert seqs(store.list(STRANGER, theirs.pk).events) == [2, 3]
        assert store.prune(before=cutoff, limit=10) == 3
        assert self.prune_everything(store) == 0

    @pytest.mark.django_db
    def test_prune_deletes_at_most_the_configured_batch_by_default(self, store: Any, settings: Any) -> None:
        settings.AGENT_PERSISTENCE = {**getattr(django_settings, "AGENT_PERSISTENCE", {}), "SWEEP_BATCH_SIZE": 2}
        conversation = self.make_conversation()
        store.append(OWNER, conversation.pk, [tick() for _ in range(5)])
        cutoff = moment_passes()
        assert [store.prune(before=cutoff) for _ in range(4)] == [2, 2, 1, 0]

    @pytest.mark.django_db
    @pytest.mark.parametrize(
        "arguments",
        [
            {"before": None},
            {"before": datetime(2030, 1, 1)},
            {"before": "yesterday"},
            {"before": timezone.now(), "limit": 0},
            {"before": timezone.now(), "limit": "5"},
            {"before": timezone.now(), "limit": True},
        ],
    )
    def test_bad_prune_arguments_are_validation(self, store: Any, arguments: dict[str, Any]) -> None:
        conversation = self.make_conversation()
        store.append(OWNER, conversation.pk, [tick()])
        with pytest.raises(Validation):
            store.prune(**arguments)
        assert self.all_seqs(store, conversation) == [1]

    @pytest.mark.django_db
    def test_events_are_deleted_with_their_conversation(self, store: Any) -> None:
        doomed, kept = self.make_conversation(), self.make_conversation()
        store.append(OWNER, doomed.pk, [tick(), tick()])
        store.append(OWNER, kept.pk, [tick()])
        self.family.conversations.delete(OWNER, doomed.pk)
        with pytest.raises(NotFound):
            store.list(OWNER, doomed.pk)
        with pytest.raises(NotFound):
            store.append(OWNER, doomed.pk, [tick()])
        assert self.all_seqs(store, kept) == [1]
        # The id made again starts a new log: nothing of the old one is left.
        self.family.conversations.create(OWNER, id=doomed.pk)
        assert self.all_seqs(store, doomed) == [] and self.stored_counter(doomed) == 0

    # -- async twins -------------------------------------------------------------------------

    @pytest.mark.django_db
    def test_async_twins_do_what_the_sync_methods_do(self, store: Any) -> None:
        conversation = self.make_conversation()
        events = async_to_sync(store.aappend)(OWNER, conversation.pk, [tick(), tick()])
        assert seqs(events) == [1, 2]
        assert seqs(async_to_sync(store.alist)(OWNER, conversation.pk, after=1).events) == [2]
        assert async_to_sync(store.asummary)(OWNER, [conversation.pk])[conversation.pk].last_seq == 2
        assert async_to_sync(store.aprune)(before=moment_passes()) == 2

    # -- races -------------------------------------------------------------------------------

    @pytest.mark.django_db(transaction=True)
    def test_processes_appending_one_at_a_time_get_every_seq_once(self, store: Any) -> None:
        """8 OS processes append 25 events each, one call at a time, to one conversation."""
        conversation = self.make_conversation()
        processes, per_process = 8, 25

        def append_one_by_one(worker: int) -> list[int]:
            return [
                store.append(OWNER, conversation.pk, [tick(worker=worker, n=n)])[0].seq for n in range(per_process)
            ]

        results = self.family.run_in_processes(processes, append_one_by_one)
        assert_no_errors(results)
        handed_out = sorted(seq for worker_seqs in results for seq in worker_seqs)
        assert handed_out == list(range(1, processes * per_process + 1))
        assert all(worker_seqs == sorted(worker_seqs) for worker_seqs in results)
        stored = store.list(OWNER, conversation.pk, limit=app_settings.MAX_PAGE_SIZE).events
        assert seqs(stored) == handed_out
        for event in stored:
            assert results[event.data["worker"]][event.data["n"]] == event.seq
        assert self.stored_counter(conversation) == processes * per_process

    @pytest.mark.django_db(transaction=True)
    def test_threads_appending_batches_get_consecutive_runs_without_gaps(self, store: Any) -> None:
        """16 threads append batches of 1 to 4 events, several rounds each."""
        conversation = self.make_conversation()
        threads, rounds = 16, 4

        def append_batches(worker: int) -> list[list[int]]:
            size = worker % 4 + 1
            return [
                seqs(store.append(OWNER, conversation.pk, [tick(worker=worker) for _ in range(size)]))
                for _ in range(rounds)
            ]

        results = run_in_threads(threads, append_batches)
        assert_no_errors(results)
        batches = [batch for worker_batches in results for batch in worker_batches]
        for batch in batches:
            assert batch == list(range(batch[0], batch[0] + len(batch)))
        total = sum(len(batch) for batch in batches)
        assert sorted(seq for batch in batches for seq in batch) == list(range(1, total + 1))
        assert self.all_seqs(store, conversation) == list(range(1, total + 1))
        assert self.stored_counter(conversation) == total

    @pytest.mark.django_db(transaction=True)
    def test_concurrent_appends_continue_after_a_prune(self, store: Any) -> None:
        conversation = self.make_conversation()
        store.append(OWNER, conversation.pk, [tick() for _ in range(10)])
        assert store.prune(before=moment_passes()) == 10
        results = run_in_threads(8, lambda worker: seqs(store.append(OWNER, conversation.pk, [tick(), tick()])))
        assert_no_errors(results)
        assert sorted(seq for batch in results for seq in batch) == list(range(11, 27))

    @pytest.mark.django_db(transaction=True)
    def test_summary_is_never_ahead_of_list(self, store: Any) -> None:
        """While others append, every last_seq a summary reports is already listable."""
        conversation = self.make_conversation()
        appenders, readers, rounds = 4, 4, 30

        def append_or_read(worker: int) -> list[int]:
            if worker < appenders:
                for _ in range(rounds):
                    store.append(OWNER, conversation.pk, [tick(), tick()])
                return []
            unlisted = []
            for _ in range(rounds):
                last_seq = store.summary(OWNER, [conversation.pk])[conversation.pk].last_seq
                newest = store.list(OWNER, conversation.pk, after=last_seq - 1, limit=1).events if last_seq else []
                if last_seq and seqs(newest) != [last_seq]:
                    unlisted.append(last_seq)
            return unlisted

        results = run_in_threads(appenders + readers, append_or_read)
        assert_no_errors(results)
        assert [seq for unlisted in results for seq in unlisted] == []
        assert self.stored_counter(conversation) == appenders * rounds * 2
